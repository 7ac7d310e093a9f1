"""A Jupyter kernel that is a fork of the runner rather than a new interpreter.

Inside a sandbox entered from the fork server (``mlbook_kernel.forkserver``) the runner already has
torch, matplotlib and ipykernel imported; starting the kernel as ``python -m ipykernel_launcher``
would import them all again. Instead the runner forks a *seed* first thing, while it is still
single-threaded (no event loop, no ZeroMQ threads yet), and the seed waits on a pipe. When
nbclient asks jupyter_client to launch the kernel, ``ForkingProvisioner`` hands the seed the
kernel's command line and the seed becomes ``IPKernelApp`` in place. Everything else is
jupyter_client's own ``LocalProvisioner``: the connection file, interrupts by SIGINT to the
kernel's process group, kill, poll and wait, through a ``Popen``-like handle on the seed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from mlbook_kernel.polling import SlicedKernelManager


class KernelSeed:
    """A forked child that waits to become the kernel (or to exit, if never asked)."""

    def __init__(self) -> None:
        read_fd, self._write_fd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._write_fd)
            _grow(read_fd)  # never returns
        os.close(read_fd)

    def start(self, argv: list[str], env: dict[str, str] | None, cwd: str | None) -> "ForkedProcess":
        """Turn the seed into the kernel ``argv`` describes (``python -m ipykernel_launcher -f ...``)."""
        with os.fdopen(self._write_fd, "w") as pipe:
            pipe.write(json.dumps({"argv": argv, "env": env, "cwd": cwd}))
        return ForkedProcess(self.pid)


def _grow(read_fd: int) -> None:
    """In the seed: wait for the kernel's command line, then run the kernel; never return."""
    code = 0
    try:
        os.setsid()  # its own process group: interrupts and kills reach the kernel, not the runner
        os.closerange(3, read_fd)  # the runner's pipes and sockets are not the kernel's
        os.closerange(read_fd + 1, 1 << 16)
        with os.fdopen(read_fd) as pipe:
            text = pipe.read()
        if not text:
            os._exit(0)  # the runner ended without a kernel
        order = json.loads(text)
        if order["env"] is not None:
            os.environ.clear()
            os.environ.update(order["env"])
        if order["cwd"]:
            os.chdir(order["cwd"])
        args = order["argv"]
        kernel_args = args[args.index("-f"):]
        # jupyter_client's launcher would have set JPY_PARENT_PID, which ipykernel reads at import
        # (in the fork server): say it here, so the kernel exits if the runner dies, as a launched one does.
        kernel_args.append(f"--IPKernelApp.parent_handle={os.getppid()}")
        sys.argv = [args[0], *kernel_args]
        from ipykernel.kernelapp import IPKernelApp

        IPKernelApp.launch_instance(argv=kernel_args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:  # noqa: BLE001 - report on stderr (the sandbox log), never return
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class ForkedProcess:
    """The subset of ``subprocess.Popen`` jupyter_client uses, for a forked child."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkingProvisioner(LocalProvisioner):
    """``LocalProvisioner`` whose launch wakes the seed instead of starting an interpreter."""

    seed: KernelSeed | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        if self.seed is None:
            raise RuntimeError("the forked kernel was started twice (restarts are not supported)")
        self.process = self.seed.start(cmd, kwargs.get("env"), kwargs.get("cwd"))
        self.seed = None
        self.pid = self.pgid = self.process.pid
        self.cwd = kwargs.get("cwd") or os.getcwd()
        return self.connection_info


class ForkedKernelManager(SlicedKernelManager):
    """The kernel manager nbclient uses in a warm sandbox: its provisioner forks the seed (its
    clients wait in short polls, as everywhere here)."""

    seed: KernelSeed | None = None  # set by the runner before the client starts the kernel

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", None) or _new_id()
            self.provisioner = ForkingProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
            self.provisioner.seed = type(self).seed
            type(self).seed = None
        return await super()._async_pre_start_kernel(**kw)


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())
