"""Grading student code that cannot touch the grader.

The parts, composed by ``run.execute_sandboxed``:
- ``limits``   what one submission may use (memory, CPU, processes, files, output, time);
- ``bwrap``    the bubblewrap command line that isolates the kernel (what it can see and write);
- ``judge``    the trusted side of every hidden check, serving the kernel on a unix socket;
- ``remote``   how a check, running in the grader, calls the student's functions in the kernel;
- ``forkserver`` warm kernels: a pre-imported process whose forks enter each new sandbox
               (``mlbook_probe.zygote``), so a notebook does not pay torch's imports again;
- ``run``      one submission end to end: start the judge, run the notebook in the sandbox,
               collect the executed notebook (untrusted) and the verdicts (trusted).
"""
