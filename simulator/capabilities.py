"""The Linux capabilities a job's container keeps, one list for every backend.

Docker's default set less NET_RAW, MKNOD, SETFCAP and SETPCAP: what ordinary jobs and sshd use
as root in their own container, and inside the Pod Security "baseline" profile. Each kept
capability and why: docs/security.md.
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
