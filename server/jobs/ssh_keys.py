"""The key pair a job's instances use to reach each other (the ssh plugin's `jobssh`).

Made fresh for every attempt and handed to the backend with the launch request only: the job's
stored config never holds it, and a new attempt gets a new pair.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def job_key_pair(comment: str) -> tuple[str, str]:
    """(private key in OpenSSH format, `ssh-ed25519 ... comment` public key line)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode("ascii")
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, f"{public.decode('ascii')} {comment}"
