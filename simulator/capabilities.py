"""The Linux capabilities a job's container keeps, one list for every backend.

The Docker backend starts containers with no capability but these and `no-new-privileges`; the
Kubernetes backend drops ALL and adds the same list back, with `allowPrivilegeEscalation:
false` (Kubernetes' name for no-new-privileges). The list is Docker's default set less NET_RAW,
MKNOD, SETFCAP and SETPCAP, hence inside the Pod Security "baseline" profile's allowed set. What
remains is what the entrypoint and ordinary jobs use as root in their own container: CHOWN,
DAC_OVERRIDE, FOWNER, FSETID (package managers, tar, pip, writing into mounted folders of
another owner), SETUID, SETGID (switching to an unprivileged user: su, gosu, apt's sandbox,
sshd), KILL (signalling a process of another user in the container), NET_BIND_SERVICE (a server
on a port below 1024 inside the container), SYS_CHROOT and AUDIT_WRITE (sshd's privilege
separation and login records: OpenPAI jobs commonly run sshd on their `ssh` port).

The "restricted" profile allows only NET_BIND_SERVICE to be added (RESTRICTED_CAPABILITIES).
"""

from __future__ import annotations

KEPT_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
    "SYS_CHROOT",
)
RESTRICTED_CAPABILITIES = ("NET_BIND_SERVICE",)
SECURITY_OPTIONS = ("no-new-privileges",)
