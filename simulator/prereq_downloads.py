"""Data prerequisites: URLs fetched over HTTP(S) or FTP, and local files copied, within the
download budget and the fetch policy, into one cache entry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import astuple
from pathlib import Path

import httpx

from simulator import ftp_fetch, local_copy
from simulator.dfs import is_dfs_uri
from simulator.fetch_policy import BlockedAddress, GuardedTransport
from simulator.materials import (
    CHUNK,
    PROGRESS_EVERY,
    MaterialError,
    MaterialKind,
    Progress,
    Source,
    cache_key,
    content_length,
    human_size,
    shown,
)
from simulator.prereq_sources import MaterialSources


class Downloads(MaterialSources):
    """Data put in the cache."""

    # --- data --------------------------------------------------------------------------------

    def _materialize_download(
        self, name: str, uris: Sequence[str], report: Progress, whole: bool = False, owner: str = ""
    ) -> Path:
        sources = self._sources(name, uris, owner)
        looked = [self._scan(name, s.path) if s.path else None for s in sources]
        first = looked[0]
        # a script's one FTP directory is the mounted directory itself, as a local one is
        contents = whole and len(sources) == 1 and sources[0].ftp is not None
        whole = whole and bool(first and first[0].kind == "dir")
        marks = ["whole"] if whole else ["contents"] if contents else []
        # the host paths are in the key: one user's hdfs://h/x is not another's
        where = [str(s.path) if s.path else None for s in sources]

        def key_of(stamps: Sequence[list[local_copy.Entry] | None]) -> str:
            data = [None if s is None else [astuple(e) for e in s] for s in stamps]
            return cache_key(MaterialKind.DOWNLOAD.value, list(uris), where, data, *marks)

        noun = f"data {name!r}"

        def fill(work: Path) -> str:
            budget = [self.max_download_bytes]
            read: list[list[local_copy.Entry] | None] = []
            with httpx.Client(
                transport=GuardedTransport(self.fetch_policy),  # every hop's address checked
                timeout=self.http_timeout,
                follow_redirects=True,
                headers={"Accept-Encoding": "identity"},  # the bytes as published
            ) as client:
                for source in sources:
                    target = work if whole else work / source.entry
                    if source.url is not None:
                        self._fetch_url(client, name, source.url, target, budget, report)
                        read.append(None)
                    elif source.ftp is not None:
                        self._fetch_ftp(name, source, work, contents, budget, report)
                        read.append(None)
                    else:
                        assert source.path is not None
                        read.append(self._copy_local(name, source, target, budget, report))
            report(name, f"{noun} is ready ({human_size(self.max_download_bytes - budget[0])})")
            return key_of(read)

        return self._cached(
            name,
            MaterialKind.DOWNLOAD,
            key_of(looked),
            fill,
            on_wait=lambda: report(name, f"waiting for another download of {noun}"),
            on_hit=lambda: report(name, f"{noun} is cached"),
        )

    def _scan(self, name: str, path: Path) -> list[local_copy.Entry]:
        """What a copy of the local path would read now ([] when it does not exist: the copy
        says so), looked at without following links."""
        try:
            fd = local_copy.open_beneath(*self._beneath(path))
        except local_copy.Missing:
            return []
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"prerequisite {name!r}: cannot read {path}: {exc}") from None
        try:
            return local_copy.scan(fd, path)
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"prerequisite {name!r}: cannot read {path}: {exc}") from None
        finally:
            os.close(fd)

    def _fetch_url(
        self,
        client: httpx.Client,
        name: str,
        url: str,
        target: Path,
        budget: list[int],
        report: Progress,
    ) -> None:
        where = f"prerequisite {name!r}: {shown(url)}"
        try:
            with client.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise MaterialError(
                        f"{where} returned HTTP {response.status_code} {response.reason_phrase}"
                    )
                length = content_length(response)
                if length is not None and length > budget[0]:
                    raise MaterialError(self._too_big(where, length, budget))
                size = f" ({human_size(length)})" if length is not None else ""
                report(name, f"downloading data {name!r}{size} from {shown(url)}")
                received = 0
                last = time.monotonic()
                with target.open("xb") as out:
                    for chunk in response.iter_raw(CHUNK):
                        received += len(chunk)
                        if received > budget[0]:
                            raise MaterialError(self._too_big(where, None, budget))
                        out.write(chunk)
                        if time.monotonic() - last >= PROGRESS_EVERY:
                            last = time.monotonic()
                            done = f"{human_size(received)}"
                            if length:
                                done = f"{received * 100 // length}% of {human_size(length)}"
                            report(name, f"downloading data {name!r}: {done}")
                budget[0] -= received
        except BlockedAddress as exc:
            raise MaterialError(f"{where}: refused: {exc}") from None
        except httpx.ConnectError as exc:
            raise MaterialError(f"{where}: could not connect: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise MaterialError(
                f"{where}: no progress for {self.http_timeout:g} s ({type(exc).__name__})"
            ) from exc
        except httpx.HTTPError as exc:
            raise MaterialError(f"{where}: download failed: {exc}") from exc

    def _fetch_ftp(
        self,
        name: str,
        source: Source,
        folder: Path,
        contents: bool,
        budget: list[int],
        report: Progress,
    ) -> None:
        """An `ftp://` file or tree, through the fetch policy; failures worded as HTTP's are."""
        assert source.ftp is not None
        url = shown(source.uri)
        where = f"prerequisite {name!r}: {url}"
        last = [time.monotonic()]

        def started(what: str, size: int | None) -> None:
            amount = f" ({human_size(size)})" if size is not None else f" (a {what})"
            report(name, f"downloading data {name!r}{amount} from {url}")

        def progress(received: int, size: int | None) -> None:
            if time.monotonic() - last[0] >= PROGRESS_EVERY:
                last[0] = time.monotonic()
                done = (
                    f"{received * 100 // size}% of {human_size(size)}"
                    if size
                    else human_size(received)
                )
                report(name, f"downloading data {name!r}: {done}")

        try:
            received = ftp_fetch.fetch(
                source.ftp,
                folder,
                source.entry,
                contents=contents,
                policy=self.fetch_policy,
                timeout=self.http_timeout,
                limit=budget[0],
                progress=progress,
                on_start=started,
            )
        except BlockedAddress as exc:
            raise MaterialError(f"{where}: refused: {exc}") from None
        except ftp_fetch.OverLimit as exc:
            raise MaterialError(self._too_big(where, exc.size, budget)) from None
        except ftp_fetch.NotFound as exc:
            raise MaterialError(f"{where} {exc}") from None
        except ftp_fetch.FtpFetchError as exc:
            raise MaterialError(f"{where}: {exc}") from None
        budget[0] -= received

    def _too_big(self, where: str, size: int | None, budget: list[int]) -> str:
        """Over the cap: say how big (when known), counting what earlier URIs brought."""
        before = self.max_download_bytes - budget[0]
        if size is None:
            amount = "goes"
        elif before:
            amount = f"brings it to {human_size(before + size)},"
        else:
            amount = f"is {human_size(size)},"
        return (
            f"{where} {amount} over the download limit of {human_size(self.max_download_bytes)} "
            "per prerequisite"
        )

    def _copy_local(
        self, name: str, given: Source, target: Path, budget: list[int], report: Progress
    ) -> list[local_copy.Entry]:
        """Copy the checked local path, reached from its root without following a link; returns
        what was read."""
        assert given.path is not None
        source = given.path
        uri = given.uri
        simulated = is_dfs_uri(uri) or (uri.startswith("/") and self._node_stand_in(uri))
        shown = uri if simulated else str(source)
        where = f"prerequisite {name!r}: {shown}"
        try:
            fd = local_copy.open_beneath(*self._beneath(source))
        except local_copy.Missing:
            raise MaterialError(f"{where} does not exist{self._fill_hint(uri)}") from None
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"{where} could not be copied: {exc}") from exc
        try:
            size = sum(entry.size for entry in local_copy.scan(fd, source))
            if size > budget[0]:
                raise MaterialError(self._too_big(where, size, budget))
            report(name, f"copying data {name!r} ({human_size(size)}) from {shown}")
            read, copied = local_copy.copy(fd, source, target, budget[0])
        except local_copy.OverLimit:
            raise MaterialError(self._too_big(where, None, budget)) from None
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"{where} could not be copied: {exc}") from exc
        finally:
            os.close(fd)
        budget[0] -= copied
        return read
