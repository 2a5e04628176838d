"""Execute one notebook with nbclient against an IPython kernel that runs inside bubblewrap.

The sandbox (one per notebook, thrown away afterwards):

- no network (`--unshare-net`: only a loopback of its own), its own pid/ipc/uts namespaces, no capabilities,
  killed with its parent;
- read-only: `/usr` (and the `/bin`, `/lib*` links), `/etc/fonts`, `/etc/ld.so.cache`, the kernel's interpreter
  and its environment (`sys.prefix`, `sys.base_prefix`), the data folder at `/data`, POSIX path rules as bind
  mounts (see `paths.py`), and the tree the notebook was found in at `/project`;
- writable and throw-away: a tmpfs home (`/home/nb`) and `/tmp`, and a copy of the notebook's own folder over
  its place in `/project` (when the folder is larger than the copy limit it stays read-only, with a note);
  the index folder, when it lies inside the tree, is hidden under an empty tmpfs;
- a cleared environment: `HOME`, `PATH`, `LANG=C.UTF-8`, `TZ=UTC`, `PYTHONHASHSEED=0`, `SOURCE_DATE_EPOCH`,
  one BLAS/OpenMP thread, and the Windows/UNC path rules for `_kernel_paths.py`;
- limits: address space (`prlimit --as`, a `MemoryError` in the cell, or a dead kernel) and CPU seconds
  (`prlimit --cpu`, a dead kernel), processes and threads (`prlimit --nproc`: a fork bomb gets `EAGAIN`), a
  per-cell timeout and a whole-notebook timeout (the kernel is killed);
- an unprivileged user: started as root, the kernel runs as a uid of its own (`setpriv`), because root is exempt
  from the process limit (and no cgroups are at hand); it keeps only `CAP_DAC_READ_SEARCH`, so it can still read
  what the read-only binds show it, and it owns only the throw-away folders it may write.

The kernel talks to nbclient over ipc (Unix sockets) in a per-run folder bound at the same path on both sides.
The notebook executed is an in-memory copy: nothing is ever written back to the file it came from. Without
`bwrap` or `prlimit` the notebook is not run at all (`SandboxUnavailable`, reason `sandbox unavailable`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from nbrecall.render.availability import check_sandbox, interpreter_facts, interpreter_prefixes
from nbrecall.render.outcome import Execution, cell_errors, classify
from nbrecall.render.paths import DATA_MOUNT, HOME, PROJECT_MOUNT, PathRule, posix_binds, windows_rules

SOURCE_DATE_EPOCH = "1500000000"  # fixed, so that SVG/PDF metadata dates do not differ between runs
_KERNEL_PATHS = Path(__file__).with_name("_kernel_paths.py")


@dataclass
class Limits:
    """Resource limits of one notebook run."""

    cell_timeout: float = 60.0  # seconds per cell (nbclient), then the run stops: reason `timeout`
    notebook_timeout: float = 600.0  # seconds for the whole notebook, kernel start included
    memory_mb: int = 4096  # address-space limit of the kernel (RLIMIT_AS)
    cpu_seconds: int = 900  # CPU-time limit of the kernel (RLIMIT_CPU); SIGXCPU, then SIGKILL 5 s later
    startup_timeout: float = 60.0  # seconds for the kernel to answer kernel_info
    tmpfs_mb: int = 1024  # size of each tmpfs (/tmp, the home)
    file_mb: int = 2048  # largest file the kernel may write (RLIMIT_FSIZE), its log on the host included
    processes: int = 256  # processes + threads of the kernel's user (RLIMIT_NPROC): a fork bomb stops here


@dataclass
class SandboxSpec:
    """Where one notebook runs: the folders it sees and its limits."""

    workdir: Path  # the notebook's own folder on the host (becomes the working directory)
    project_dir: Path | None = None  # the tree it was found in (default: workdir); read-only at /project
    data_dir: Path | None = None  # read-only at /data
    rules: list[PathRule] = field(default_factory=list)
    hide: list[Path] = field(default_factory=list)  # host folders under project_dir to hide (the index)
    python: str = sys.executable  # the kernel's interpreter; it needs ipykernel
    limits: Limits = field(default_factory=Limits)
    copy_limit_mb: int = 256  # largest notebook folder copied as a writable work dir
    kernel_config: str = ""  # an IPython config file's text for the kernel (environments.kernel_config_for)


# ---------------------------------------------------------------------------------------------------------------
# Preparing the run folder and the bwrap command


def _copy_tree(src: Path, dst: Path, limit_bytes: int) -> bool:
    """Copy `src` to `dst` (symlinks kept as links; .git and checkpoints skipped); False if over the limit."""
    total = 0
    skip = {".git", ".ipynb_checkpoints", "__pycache__"}
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            if total > limit_bytes:
                return False
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(*skip))
    # the copy is the notebook's scratch space: make it writable even when the archive is read-only
    for root, dirs, files in os.walk(dst):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o600)
    os.chmod(dst, 0o755)
    return True


SANDBOX_UID_BASE = 610_000  # kernels started by root run as SANDBOX_UID_BASE + (pid % 50,000): no real account


def sandbox_uid() -> int:
    """The uid the kernel runs as: 0 (stay as we are) unless we are root, who must drop to a user of its own for
    RLIMIT_NPROC to apply. One uid per rendering process, so parallel workers do not share one process budget."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return 0
    return SANDBOX_UID_BASE + os.getpid() % 50_000


def _processes_of(uid: int) -> int:
    """How many processes `uid` runs now: when we cannot change user, the kernel's process limit counts them too."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


def _tree(root: Path | None) -> list[Path]:
    if root is None:
        return []
    paths = [root]
    for folder, dirs, files in os.walk(root):
        paths += [Path(folder) / name for name in dirs + files]
    return paths


class PreparedRun:
    """A per-notebook run folder (ipc sockets, startup file, passwd, work copy) and the bwrap command line."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.notes: list[str] = []
        self.root = Path(tempfile.mkdtemp(prefix="nbr-"))
        self.ipc = self.root / "ipc"
        self.ipc.mkdir()
        self.log_path = self.root / "kernel.log"
        project = (spec.project_dir or spec.workdir).resolve()
        workdir = spec.workdir.resolve()
        try:
            self.rel = workdir.relative_to(project).as_posix()
        except ValueError:
            project, self.rel = workdir, "."
        self.project = project
        self.workdir = workdir
        self.cwd = PROJECT_MOUNT if self.rel == "." else f"{PROJECT_MOUNT}/{self.rel}"
        self.copy: Path | None = self.root / "work"
        if not _copy_tree(workdir, self.copy, spec.copy_limit_mb * 1024 * 1024):
            self.copy = None
            self.notes.append(f"notebook folder larger than {spec.copy_limit_mb} MB: read-only in the sandbox")
        self.uid = sandbox_uid()
        if self.uid:  # the kernel's own user owns what it may write; the rest stays root's
            os.chmod(self.root, 0o755)
            for path in [self.ipc, *_tree(self.copy)]:
                os.chown(path, self.uid, self.uid, follow_symlinks=False)
        (self.root / "passwd").write_text(f"nb:x:{self.uid}:{self.uid}:nb:{HOME}:/bin/sh\n")
        (self.root / "group").write_text(f"nb:x:{self.uid}:\n")
        (self.root / "matplotlibrc").write_text("svg.hashsalt: nbrecall\n")
        self.kernel_config: Path | None = None
        if spec.kernel_config:
            self.kernel_config = self.root / "kernel_config.py"
            self.kernel_config.write_text(spec.kernel_config, encoding="utf-8")
        startup = self.root / "startup.py"
        startup.write_text(
            "exec(compile(open('/nbrecall/_kernel_paths.py').read(), '/nbrecall/_kernel_paths.py', 'exec'),"
            " {'__name__': '_nbrecall_paths'})\n"
        )
        self.startup = startup

    def bwrap_args(self, *, interpreter: bool = True) -> list[str]:
        """The bubblewrap command up to the program it runs (mounts, environment); `command` adds the kernel.
        `interpreter=False` leaves the Python interpreter's folders out (the Pyodide backend runs Node.js)."""
        spec, lim = self.spec, self.spec.limits
        bwrap = shutil.which("bwrap") or "bwrap"
        cmd = [bwrap, "--die-with-parent", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--cap-drop", "ALL", "--hostname", "sandbox"]
        if self.uid:  # just what setpriv needs to become the kernel's user and keep read access
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_DAC_READ_SEARCH"]
        cmd += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_symlink():
                cmd += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                cmd += ["--ro-bind", str(host), f"/{name}"]
        for etc in ("/etc/fonts", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/mime.types"):
            if os.path.exists(etc):
                cmd += ["--ro-bind", etc, etc]
        cmd += ["--ro-bind", str(self.root / "passwd"), "/etc/passwd",
                "--ro-bind", str(self.root / "group"), "/etc/group"]
        tmpfs = str(lim.tmpfs_mb * 1024 * 1024)
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        cmd += ["--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp", "--perms", "0777", "--size", tmpfs,
                "--tmpfs", HOME]
        cmd += ["--perms", "0777", "--dir", f"{HOME}/.config", "--perms", "0777", "--dir", f"{HOME}/.config/matplotlib"]
        cmd += ["--ro-bind", str(self.root / "matplotlibrc"), f"{HOME}/.config/matplotlib/matplotlibrc"]
        for prefix in interpreter_prefixes(spec.python):
            if interpreter:
                cmd += ["--ro-bind", prefix, prefix]
        cmd += ["--ro-bind", str(self.project), PROJECT_MOUNT]
        if self.copy is not None:
            cmd += ["--bind", str(self.copy), self.cwd]
        for hidden in spec.hide:
            try:
                rel = hidden.resolve().relative_to(self.project).as_posix()
            except (ValueError, OSError):
                continue
            if hidden.is_dir() and rel != ".":
                cmd += ["--tmpfs", f"{PROJECT_MOUNT}/{rel}"]
        if spec.data_dir is not None:
            cmd += ["--ro-bind", str(spec.data_dir.resolve()), DATA_MOUNT]
        binds, notes = posix_binds(spec.rules, spec.data_dir)
        self.notes += notes
        for host, target in binds:
            cmd += ["--ro-bind", str(host), target]
        cmd += ["--bind", str(self.ipc), str(self.ipc)]
        cmd += ["--ro-bind", str(_KERNEL_PATHS), "/nbrecall/_kernel_paths.py",
                "--ro-bind", str(self.startup), "/nbrecall/startup.py"]
        if self.kernel_config is not None:
            cmd += ["--ro-bind", str(self.kernel_config), "/nbrecall/kernel_config.py"]
        cmd += ["--chdir", self.cwd, "--clearenv"]
        env = {
            "HOME": HOME, "USER": "nb", "LOGNAME": "nb", "SHELL": "/bin/sh",
            "PATH": f"{os.path.dirname(spec.python)}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
            "PYTHONHASHSEED": "0", "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH, "PYTHONDONTWRITEBYTECODE": "1",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1", "JUPYTER_PLATFORM_DIRS": "1",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMEXPR_MAX_THREADS": "1", "MALLOC_ARENA_MAX": "2",
            "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
            "NBRECALL_PATH_MAP": json.dumps(windows_rules(spec.rules)),
        }
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        return cmd

    def command(self, connection_file: str) -> list[str]:
        """The bwrap command line of the kernel: `bwrap_args`, then prlimit and ipykernel under the run's limits."""
        spec, lim = self.spec, self.spec.limits
        cmd = self.bwrap_args()
        memory = lim.memory_mb * 1024 * 1024
        cpu = max(1, int(lim.cpu_seconds))
        limits = [f"--as={memory}", f"--cpu={cpu}:{cpu + 5}", f"--fsize={lim.file_mb * 1024 * 1024}", "--core=0",
                  self.process_limit()]
        version = tuple(interpreter_facts(spec.python).get("version") or (3, 11))
        flags = ["-Xfrozen_modules=off"] if version >= (3, 11) else []
        kernel_args = ["--HistoryManager.enabled=False", "--IPKernelApp.exec_files=['/nbrecall/startup.py']"]
        if self.kernel_config is not None:
            kernel_args.append("--config=/nbrecall/kernel_config.py")
        cmd += ["--", *self.user_switch(), shutil.which("prlimit") or "/usr/bin/prlimit", *limits, "--",
                spec.python, *flags, "-m", "ipykernel_launcher", "-f", connection_file, *kernel_args]
        return cmd

    def user_switch(self) -> list[str]:
        """The `setpriv` command that turns root into the sandbox's own user (nothing when we are not root)."""
        if not self.uid:
            return []
        return [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={self.uid}", f"--regid={self.uid}",
                "--clear-groups", "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search",
                "--bounding-set=-all,+dac_read_search", "--no-new-privs", "--"]

    def process_limit(self) -> str:
        """`prlimit --nproc`: counted per user, so without our own uid the user's other processes count too."""
        return f"--nproc={self.spec.limits.processes + (0 if self.uid else _processes_of(os.getuid()))}"

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class SandboxKernelManager(AsyncKernelManager):
    """An async kernel manager whose kernel command is the bubblewrap command of a `PreparedRun` run."""

    prepared: PreparedRun | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        assert self.prepared is not None
        path = os.path.realpath(self.connection_file)
        if self.prepared.uid and os.path.exists(path):  # written 0600 by the client; the kernel must read it
            os.chown(path, self.prepared.uid, self.prepared.uid)
        return self.prepared.command(path)


MAX_OUTPUT_CHARS = 10_000_000  # per cell: beyond this, outputs are dropped (a marker says so)


def _size(content: dict[str, Any]) -> int:
    size = len(content.get("text", "") or "")
    for value in (content.get("data") or {}).values():
        size += len(value) if isinstance(value, str) else len(json.dumps(value))
    return size + sum(len(t) for t in content.get("traceback", []) or [])


class _Client(NotebookClient):
    """nbclient with the sandbox's kernel manager and a cap on how much output one cell may send."""

    def __init__(self, nb: nbformat.NotebookNode, prepared: PreparedRun, **kw: Any) -> None:
        super().__init__(nb, **kw)
        self._prepared = prepared
        self.sandbox_km: SandboxKernelManager | None = None
        self._sizes: dict[int, int] = {}

    def output(self, outs: list[nbformat.NotebookNode], msg: dict[str, Any], display_id: str | None,
               cell_index: int) -> nbformat.NotebookNode | None:
        used = self._sizes.get(cell_index, 0)
        if used > MAX_OUTPUT_CHARS:
            return None
        used += _size(msg.get("content") or {})
        self._sizes[cell_index] = used
        if used > MAX_OUTPUT_CHARS:
            marker = nbformat.v4.new_output("stream", name="stderr",
                                            text=f"[nbrecall: output over {MAX_OUTPUT_CHARS:,} characters dropped]\n")
            outs.append(marker)
            return marker
        return super().output(outs, msg, display_id, cell_index)

    def create_kernel_manager(self) -> SandboxKernelManager:
        km = SandboxKernelManager(kernel_name="python3", transport="ipc",
                                  ip=str(self._prepared.ipc / "k"),
                                  connection_file=str(self._prepared.ipc / "kernel.json"))
        km.prepared = self._prepared
        self.km = km
        self.sandbox_km = km
        return km


# ---------------------------------------------------------------------------------------------------------------
# Running


def _exit_code(km: SandboxKernelManager | None) -> int | None:
    try:
        process = km.provisioner.process if km and km.provisioner else None  # type: ignore[attr-defined]
    except AttributeError:
        return None
    if process is None:
        return None
    return process.poll()


def log_tail(path: Path, limit: int = 2000) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


async def _run(nb: nbformat.NotebookNode, prepared: PreparedRun, result: Execution) -> None:
    lim = prepared.spec.limits
    client = _Client(
        nb, prepared,
        timeout=max(1, math.ceil(lim.cell_timeout)),
        startup_timeout=max(1, math.ceil(lim.startup_timeout)),
        allow_errors=True, interrupt_on_timeout=False, record_timing=False, shutdown_kernel="immediate",
        kernel_name="python3", iopub_timeout=4,
    )
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    done: set[int] = set()
    with open(prepared.log_path, "wb") as log:
        async with client.async_setup_kernel(stdout=log, stderr=log):
            assert client.kc is not None and client.sandbox_km is not None  # both made by the setup
            await client.async_wait_for_reply(await ensure_async(client.kc.kernel_info()))
            count = 0
            for index in code_cells:
                cell = nb.cells[index]
                try:
                    count += 1
                    await client.async_execute_cell(cell, index, execution_count=count)
                except CellTimeoutError:
                    result.timed_out = index
                    break
                except DeadKernelError:
                    result.kernel_died = True
                    result.died_at = index
                    result.exit_code = _exit_code(client.sandbox_km)
                    break
                done.add(index)
            # a kernel killed by a limit right after replying shows up here
            if not result.kernel_died and not await ensure_async(client.sandbox_km.is_alive()):
                result.kernel_died = True
                result.exit_code = _exit_code(client.sandbox_km)
    result.executed = sorted(done)
    result.not_run = [i for i in code_cells if i not in done and i not in (result.timed_out, result.died_at)]


def execute_notebook(nb: nbformat.NotebookNode, spec: SandboxSpec) -> Execution:
    """Run a deep copy of `nb` in a fresh sandbox; return the executed copy, its errors and a stale reason."""
    check_sandbox()
    nb = copy.deepcopy(nb)
    started = time.monotonic()
    result = Execution(notebook=nb)
    prepared = PreparedRun(spec)
    result.notes += prepared.notes
    try:
        asyncio.run(asyncio.wait_for(_run(nb, prepared, result), timeout=spec.limits.notebook_timeout))
    except TimeoutError:
        result.notebook_timeout = True
    except RuntimeError as exc:  # kernel failed to start, or died before replying
        result.kernel_died = True
        result.notes.append(f"kernel error: {exc}")
    finally:
        result.stderr = log_tail(prepared.log_path)
        result.notes += [n for n in prepared.notes if n not in result.notes]
        prepared.cleanup()
        result.duration_s = time.monotonic() - started
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    if result.notebook_timeout:
        result.not_run = [i for i in code_cells if i not in result.executed]
    result.errors = cell_errors(nb, result)
    result.reason = classify(result)
    return result
