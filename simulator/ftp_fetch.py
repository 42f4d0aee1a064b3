"""Files and directory trees fetched from an FTP server for a data or script prerequisite.

OpenPAI fetches `ftp://` prerequisites, so the simulator does too, held to the same fetch
policy as HTTP: the control and passive data connections go only to the checked address. URL
forms: docs/cli.md; the network rule: docs/security.md.
"""

from __future__ import annotations

import contextlib
import ftplib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from simulator.fetch_policy import FetchPolicy

DEFAULT_PORT = 21
MAX_DEPTH = 64  # directories within directories: deeper than any real tree
_CHUNK = 1 << 20
_TYPE_SUFFIX = re.compile(r";type=[aAiIdD]$")
_UNSUPPORTED = ("500", "501", "502", "504")  # the command is not known to this server

Progress = Callable[[int, int | None], None]
"""Called with (bytes received so far for this URL, the file's size when the server said)."""


class FtpFetchError(Exception):
    """The fetch failed; the message says why, without the URL (the caller names it)."""


class Unreachable(FtpFetchError):
    """The host does not resolve or no checked address accepted the connection."""


class LoginRefused(FtpFetchError):
    """The server refused the user and password (or the anonymous login)."""


class NotFound(FtpFetchError):
    """The path is neither a file nor a directory the user may read."""


class Stalled(FtpFetchError):
    """Nothing arrived for the whole timeout."""


class OverLimit(FtpFetchError):
    """More bytes than allowed; `size` is the announced size when it is known."""

    def __init__(self, size: int | None) -> None:
        super().__init__("over the limit")
        self.size = size


@dataclass(frozen=True)
class FtpLocation:
    """What an `ftp://` URL asks for."""

    host: str
    port: int
    user: str
    password: str
    path: str  # relative to the login directory; "" is the login directory itself

    @property
    def name(self) -> str:
        """The last segment of the path: what the file or directory is saved as."""
        return PurePosixPath(self.path).name if self.path else ""


def parse(url: str) -> FtpLocation:
    """The parts of an ftp URL; ValueError when it has no host or a bad port."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "ftp" or not parts.hostname:
        raise ValueError("has no host")
    port = parts.port or DEFAULT_PORT  # ValueError for a port that is not a number
    path = unquote(_TYPE_SUFFIX.sub("", parts.path))
    if any(c in path for c in "\r\n\0"):
        raise ValueError("has a line break or NUL in its path")
    if path.startswith("/"):
        path = path[1:]
    path = path.rstrip("/") if path.strip("/") else path
    return FtpLocation(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username) if parts.username else "anonymous",
        password=unquote(parts.password or "") if parts.username else "anonymous@",
        path=path,
    )


def fetch(
    location: FtpLocation,
    folder: Path,
    entry: str,
    *,
    contents: bool,
    policy: FetchPolicy,
    timeout: float,
    limit: int,
    progress: Progress,
    on_start: Callable[[str, int | None], None],
) -> int:
    """Copy the file or tree at `location` to `folder/entry` (a tree's contents into `folder`
    itself when `contents`); returns the bytes written. `on_start` is told ("file" or
    "directory", size when known) once the server has said what the path is.

    Raises BlockedAddress (the fetch policy), or an FtpFetchError.
    """
    ftp = _connect(location, policy, timeout)
    try:
        transfer = _Transfer(ftp, ftp.pwd(), limit, progress)
        ftp.voidcmd("TYPE I")
        if transfer.is_directory(location.path):
            on_start("directory", None)
            target = folder if contents else folder / entry
            target.mkdir(mode=0o755, exist_ok=contents)
            transfer.tree(location.path, target, depth=0)
            return transfer.received
        size = transfer.size(location.path)
        if size is not None and size > limit:
            raise OverLimit(size)
        on_start("file", size)
        transfer.file(location.path, folder / entry, size)
        return transfer.received
    except TimeoutError as exc:
        raise Stalled(f"no progress for {timeout:g} s") from exc
    except EOFError as exc:
        raise FtpFetchError("the server closed the connection") from exc
    except ftplib.Error as exc:
        raise _reply_error(exc) from None
    except OSError as exc:
        raise FtpFetchError(f"the transfer failed: {exc}") from exc
    finally:
        _close(ftp)


def _connect(location: FtpLocation, policy: FetchPolicy, timeout: float) -> ftplib.FTP:
    """A logged-in connection to the first checked address that answers."""
    try:
        addresses = policy.addresses(location.host, location.port)  # BlockedAddress
    except OSError as exc:
        raise Unreachable(f"could not connect: cannot resolve {location.host}: {exc}") from None
    failure = "no address"
    for address in addresses:
        ftp = ftplib.FTP(timeout=timeout)
        # the data connection goes to this checked peer, never to what a PASV reply names
        ftp.trust_server_pasv_ipv4_address = False  # type: ignore[attr-defined]
        try:
            ftp.connect(address, location.port)  # an address literal: never resolved again
        except (OSError, EOFError, ftplib.Error) as exc:
            _close(ftp)
            failure = str(exc) or type(exc).__name__
            continue
        try:
            ftp.login(location.user, location.password)
        except ftplib.error_perm as exc:
            _close(ftp)
            raise LoginRefused(f"login refused ({_code(exc)}) for user {location.user!r}") from None
        except (OSError, EOFError, ftplib.Error) as exc:
            _close(ftp)
            raise FtpFetchError(f"could not log in: {exc}") from None
        return ftp
    raise Unreachable(f"could not connect: {failure}")


def _close(ftp: ftplib.FTP) -> None:
    with contextlib.suppress(OSError):
        ftp.close()


def _code(exc: ftplib.Error) -> str:
    return str(exc)[:3]


def _reply_error(exc: ftplib.Error) -> FtpFetchError:
    """A server's refusal, in words that do not depend on how the server phrases it."""
    code = _code(exc)
    if code == "550":
        return NotFound("returned FTP 550: no such file or directory, or not readable")
    if code == "530":
        return LoginRefused(f"login refused ({code})")
    return FtpFetchError(f"returned FTP {str(exc).strip()}")


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


class _Transfer:
    """One logged-in connection's copy, counting every byte against one limit."""

    def __init__(self, ftp: ftplib.FTP, home: str, limit: int, progress: Progress) -> None:
        self.ftp = ftp
        self.home = home
        self.limit = limit
        self.progress = progress
        self.received = 0

    def is_directory(self, path: str) -> bool:
        """Whether the server lets us change into path (then changed back)."""
        if not path:
            return True
        try:
            self.ftp.cwd(path)
        except ftplib.error_perm:
            return False
        self.ftp.cwd(self.home)
        return True

    def size(self, path: str) -> int | None:
        """The size the server announces, None when it does not (SIZE is an extension)."""
        try:
            return self.ftp.size(path)
        except ftplib.error_perm as exc:
            if _code(exc) in _UNSUPPORTED:
                return None
            raise

    def file(self, path: str, target: Path, size: int | None) -> None:
        with target.open("xb") as out:
            conn = self.ftp.transfercmd(f"RETR {path}")
            try:
                while chunk := conn.recv(_CHUNK):
                    self.received += len(chunk)
                    if self.received > self.limit:
                        raise OverLimit(None)
                    out.write(chunk)
                    self.progress(self.received, size)
            finally:
                conn.close()
        self.ftp.voidresp()

    def listing(self, path: str) -> list[tuple[str, bool]]:
        """(name, is a directory) of each regular file and directory in path."""
        try:
            facts = list(self.ftp.mlsd(path, facts=["type"]))
        except ftplib.error_perm as exc:
            if _code(exc) not in _UNSUPPORTED:
                raise
        else:
            kinds = {"file": False, "dir": True}
            return [
                (name, kinds[fact.get("type", "").lower()])
                for name, fact in facts
                if fact.get("type", "").lower() in kinds
            ]
        found = []  # no MLSD (vsftpd, for one): names, then a look at each
        for listed in self.ftp.nlst(path) if path else self.ftp.nlst():
            name = PurePosixPath(listed).name
            if name not in ("", ".", ".."):
                found.append((name, self.is_directory(_join(path, name))))
        return found

    def tree(self, path: str, target: Path, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise FtpFetchError(f"has directories nested deeper than {MAX_DEPTH}")
        for name, directory in self.listing(path):
            if "/" in name or "\0" in name or name in (".", ".."):
                raise FtpFetchError(f"lists an entry named {name!r}, which cannot be saved")
            if directory:
                (target / name).mkdir(mode=0o755)
                self.tree(_join(path, name), target / name, depth + 1)
            else:
                self.file(_join(path, name), target / name, None)
