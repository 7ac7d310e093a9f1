"""What a student runs: ``mlbook validate`` before handing in.

- ``local_kernel``  run a notebook top to bottom in a plain local Jupyter kernel (no sandbox:
                    it is the student's own notebook, on the student's own machine);
- ``validate``      score its visible tests by nbgrader's rule, with an exit code that says so.
"""
