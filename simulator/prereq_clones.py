"""Script prerequisites: git repositories resolved to a commit and checked out into the cache."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from simulator.fetch_policy import BlockedAddress
from simulator.materials import (
    FULL_SHA,
    SHORT_SHA,
    MaterialError,
    MaterialKind,
    Progress,
    RepoSpec,
    cache_key,
    first_error,
    shown,
)
from simulator.prereq_sources import MaterialSources


class Clones(MaterialSources):
    """Scripts put in the cache."""

    # --- scripts -----------------------------------------------------------------------------

    def _materialize_clone(self, name: str, uris: Sequence[str], report: Progress) -> Path:
        spec = self._repo(name, uris)
        commit = self._resolve(name, spec)
        key = cache_key(MaterialKind.CLONE.value, spec.url, commit)
        noun = f"script {name!r}"

        def fill(work: Path) -> None:
            report(name, f"cloning {noun} from {shown(spec.url)} at {commit[:12]}")
            self._checkout(name, spec, commit, work)
            report(name, f"{noun} is ready at {commit[:12]}")

        return self._cached(
            name,
            MaterialKind.CLONE,
            key,
            fill,
            on_wait=lambda: report(name, f"waiting for another clone of {noun}"),
            on_hit=lambda: report(name, f"{noun} is cached at {commit[:12]}"),
        )

    def _materialize_repositories(self, name: str, uris: Sequence[str], report: Progress) -> Path:
        """Each repository of the list at its commit, in a directory of its name; the whole is
        cached under the list of (repository, commit), so a new commit of one gives a new entry."""
        repos = [
            (directory, spec, self._resolve(name, spec))
            for directory, spec in self._repos(name, uris)
        ]
        key = cache_key("repositories", [(d, s.url, c) for d, s, c in repos])
        noun = f"script {name!r}"
        at = ", ".join(f"{d} at {c[:12]}" for d, _, c in repos)

        def fill(work: Path) -> None:
            for directory, spec, commit in repos:
                report(name, f"cloning {noun} from {shown(spec.url)} at {commit[:12]}")
                target = work / directory
                target.mkdir(mode=0o755)
                self._checkout(name, spec, commit, target)
            report(name, f"{noun} is ready ({at})")

        return self._cached(
            name,
            MaterialKind.CLONE,
            key,
            fill,
            on_wait=lambda: report(name, f"waiting for another clone of {noun}"),
            on_hit=lambda: report(name, f"{noun} is cached ({at})"),
        )

    def _check_remote(self, name: str, spec: RepoSpec) -> None:
        """Refuse a repository on an address the fetch policy does not allow, as downloads are.

        git resolves the name again itself, so a name whose answers change between the two
        lookups could still slip through; git is also told never to follow a redirect.
        """
        parts = urlsplit(spec.url)
        if parts.scheme.lower() == "file" or not parts.hostname:
            return
        default_port = {"https": 443, "http": 80, "git": 9418}.get(parts.scheme.lower(), 443)
        try:
            self.fetch_policy.addresses(parts.hostname, parts.port or default_port)
        except BlockedAddress as exc:
            raise MaterialError(f"prerequisite {name!r}: {shown(spec.url)}: {exc}") from None
        except OSError as exc:
            raise MaterialError(
                f"prerequisite {name!r}: {shown(spec.url)}: cannot resolve {parts.hostname}: {exc}"
            ) from None

    def _git(self, name: str, spec: RepoSpec, *args: str, doing: str) -> str:
        self._check_remote(name, spec)
        env = {k: v for k, v in os.environ.items() if k not in ("GIT_ASKPASS", "SSH_ASKPASS")}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL="http:https:git:file", LC_ALL="C")
        try:
            done = subprocess.run(
                [
                    "git",
                    "-c",
                    "advice.detachedHead=false",
                    "-c",
                    "http.followRedirects=false",
                    *args,
                ],
                capture_output=True,
                text=True,
                timeout=self.git_timeout,
                env=env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError as exc:
            raise MaterialError(f"prerequisite {name!r}: the git command is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise MaterialError(
                f"prerequisite {name!r}: git could not {doing} {shown(spec.url)} "
                f"within {self.git_timeout:g} s"
            ) from exc
        if done.returncode != 0:
            raise MaterialError(
                f"prerequisite {name!r}: git could not {doing} {shown(spec.url)}: "
                f"{first_error(done.stderr)}"
            )
        return done.stdout

    def _resolve(self, name: str, spec: RepoSpec) -> str:
        """The commit to check out: given, or what the ref (HEAD when none) names right now."""
        ref = spec.ref
        if ref is not None and FULL_SHA.fullmatch(ref.lower()):
            return ref.lower()
        patterns = ["HEAD"] if ref is None else [ref, f"{ref}^{{}}"]
        out = self._git(name, spec, "ls-remote", "--", spec.url, *patterns, doing="list")
        found = {}
        for line in out.splitlines():
            sha, _, refname = line.partition("\t")
            found[refname] = sha
        if ref is None:
            if "HEAD" in found:
                return found["HEAD"]
            raise MaterialError(f"prerequisite {name!r}: {shown(spec.url)} has no HEAD commit")
        for candidate in (
            f"{ref}^{{}}",
            ref,
            f"refs/tags/{ref}^{{}}",
            f"refs/tags/{ref}",
            f"refs/heads/{ref}",
        ):
            if candidate in found:
                return found[candidate]
        if SHORT_SHA.fullmatch(ref.lower()):
            return ref.lower()  # an abbreviated commit; found in the full clone
        raise MaterialError(
            f"prerequisite {name!r}: {shown(spec.url)} has no branch, tag or commit {ref!r}"
        )

    def _checkout(self, name: str, spec: RepoSpec, commit: str, work: Path) -> None:
        """A shallow fetch of a full commit id where the server allows it, else a full clone."""

        def in_work(doing: str, *args: str) -> None:
            self._git(name, spec, "-C", str(work), *args, doing=doing)

        if FULL_SHA.fullmatch(commit):
            in_work("prepare a clone of", "init", "--quiet")
            try:
                in_work("fetch", "fetch", "--quiet", "--depth", "1", "--", spec.url, commit)
            except MaterialError:
                shutil.rmtree(work / ".git", ignore_errors=True)  # try a full clone instead
            else:
                in_work("check out", "checkout", "--quiet", "--detach", commit)
                return
        clone = ("clone", "--quiet", "--no-checkout", "--", spec.url, str(work))
        self._git(name, spec, *clone, doing="clone")
        try:
            in_work("find", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        except MaterialError as exc:
            raise MaterialError(
                f"prerequisite {name!r}: {shown(spec.url)} has no commit {commit!r}"
            ) from exc
        in_work("check out", "checkout", "--quiet", "--detach", commit)
        in_work("forget the origin of", "remote", "remove", "origin")  # may hold a token
