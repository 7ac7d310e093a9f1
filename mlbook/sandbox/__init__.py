"""Isolation: running a student's notebook where it cannot touch the grader.

The parts, composed by ``notebook.execute_sandboxed``:
- ``limits``      what one submission may use (memory, CPU, processes, files, output, time);
- ``bwrap``       the bubblewrap command line that isolates the kernel (what it can see and write);
- ``procmem``     memory of the sandbox's processes, measured from outside;
- ``forkserver``  warm kernels: starts and talks to ``mlbook_kernel.forkserver``, whose forks
                  enter each new sandbox with torch already imported;
- ``notebook``    one submission end to end: start the judge (``mlbook.judge``), run the notebook
                  in the sandbox, collect the executed notebook (untrusted) and the verdicts (trusted).
"""
