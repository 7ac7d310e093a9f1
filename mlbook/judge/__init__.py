"""Verdicts decided outside the student's kernel.

- ``plan``      per test cell, the trusted source the judge re-runs (from the course's source
                notebook, never from the submission) and the cells whose verdicts it needs;
- ``server``    the judge: one thread per submission, admitting only the session the runner
                reports for the running test cell, and running that cell's checks here;
- ``remote``    how a check calls the student's functions in the kernel (data only) and lends
                the kernel test objects it may call but not look inside;
- ``verdicts``  the judge's verdicts written into the executed notebook as the test cells'
                outputs, which nbgrader then scores.
"""
