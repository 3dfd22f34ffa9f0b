"""A secured local broker: TLS, SASL/SCRAM per principal, and the checklist's ACLs.

``sagacity dev up --secure`` runs the stack's Kafka the way managed Kafka runs: clients reach it
only over ``SASL_SSL`` (TLS with SCRAM-SHA-512), the broker authorises every request
(``StandardAuthorizer``, ``allow.everyone.if.no.acl.found=false``) and each role is a principal
of its own with exactly the ACLs docs/production-checklist.md prescribes (:mod:`._acls`).

Everything lives in ``<state dir>/secure/``, made once and kept until a purge:

* ``ca.pem`` — a CA made here (the clients' ``ssl.ca.location``); ``broker.pem`` — the brokers'
  key and certificate (``127.0.0.1`` and ``localhost``), signed by it;
* ``controller.pem`` — the key and certificate the brokers present to each other on the KRaft
  controller listener (mutual TLS; its subject is a super user, no password involved, since
  SCRAM credentials live in the metadata the controllers serve);
* ``principals/<name>.env`` — one file per principal (mode 0600) of ``export`` lines: the
  ``SAGACITY_KAFKA_*`` client settings that make a Sagacity process that principal.
  ``admin`` is the brokers' own user and the super user the ACLs are made with.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sagacity.dev._ports import HOST
from sagacity.errors import DevStackError

MECHANISM = "SCRAM-SHA-512"
"""The SASL mechanism every client and the brokers use."""

ADMIN = "admin"
"""The brokers' own SCRAM user and the super user that makes the ACLs and topics."""

PRINCIPALS: tuple[str, ...] = ("agents", "approvals", "compensation", "archive", "auditors")
"""The roles of the checklist, one SASL principal each."""

CONTROLLER_SUBJECT = "CN=sagacity-controller"
"""The certificate subject brokers present on the controller listener (a super user)."""

_VALIDITY = datetime.timedelta(days=825)


@dataclass(frozen=True, kw_only=True)
class Security:
    """The secured stack's material (see the module's docstring).

    Attributes:
        directory: ``<state dir>/secure``.
        passwords: each SCRAM user's password (``admin`` and every principal).
    """

    directory: Path
    passwords: Mapping[str, str]

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients trust."""
        return self.directory / "ca.pem"

    @property
    def broker_pem(self) -> Path:
        """The brokers' key and certificate (a PEM keystore)."""
        return self.directory / "broker.pem"

    @property
    def controller_pem(self) -> Path:
        """The controller listener's key and certificate (a PEM keystore)."""
        return self.directory / "controller.pem"

    def credentials_file(self, principal: str) -> Path:
        """``principals/<principal>.env``: the principal's ``export`` lines."""
        return self.directory / "principals" / f"{principal}.env"

    def client_settings(self, principal: str) -> dict[str, str]:
        """librdkafka settings that connect as ``principal``.

        Raises:
            DevStackError: no such principal.
        """
        password = self.passwords.get(principal)
        if password is None:
            known = ", ".join((ADMIN, *PRINCIPALS))
            raise DevStackError(f"no principal {principal!r} in this stack (one of {known})")
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": principal,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_file),
        }

    def export_lines(self, principal: str) -> list[str]:
        """``export SAGACITY_KAFKA_…=…`` lines for ``principal`` (a POSIX shell ``eval``s them)."""
        return [
            f"export SAGACITY_KAFKA_{key.upper().replace('.', '_')}={shlex.quote(value)}"
            for key, value in self.client_settings(principal).items()
        ]

    def broker_properties(self, *, port: int, controller_port: int) -> dict[str, str]:
        """What a secured broker adds to (and overrides in) its ``server.properties``: clients
        on ``SASL_SSL`` at ``port``, the controllers on mutual TLS at ``controller_port``."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.passwords[ADMIN]}";'
        )
        return {
            "listeners": f"SASL_SSL://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{HOST}:{port}",
            "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(self.broker_pem),
            "listener.name.controller.ssl.keystore.type": "PEM",
            "listener.name.controller.ssl.keystore.location": str(self.controller_pem),
            "listener.name.controller.ssl.client.auth": "required",
            # The brokers' client side of the controller channel presents the same key.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.controller_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN};User:{CONTROLLER_SUBJECT}",
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments creating every SCRAM user (KRaft stores them in
        its metadata from the first start on)."""
        args: list[str] = []
        for name, password in self.passwords.items():
            args += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        return args


def load_or_create(directory: Path) -> Security:
    """The material in ``directory``, made on first use (kept until the stack is purged).

    Raises:
        DevStackError: the directory holds material that cannot be read.
    """
    directory = Path(directory).resolve()
    record = directory / "passwords.json"
    if record.is_file():
        try:
            passwords = {str(k): str(v) for k, v in json.loads(record.read_text()).items()}
        except (OSError, ValueError, AttributeError) as exc:
            raise DevStackError(f"the secured stack's {record} cannot be read: {exc}") from exc
        security = Security(directory=directory, passwords=passwords)
        if security.broker_pem.is_file() and security.controller_pem.is_file():
            return security
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    # Letters and digits only: the password sits inside a JAAS string and a format argument.
    passwords = {name: secrets.token_hex(16) for name in (ADMIN, *PRINCIPALS)}
    security = Security(directory=directory, passwords=passwords)
    _write_certificates(security)
    _write_private(record, json.dumps(passwords, indent=2) + "\n")
    for principal in (ADMIN, *PRINCIPALS):
        lines = [f"# Kafka client settings of principal {principal!r} (sagacity dev up --secure)"]
        lines += security.export_lines(principal)
        _write_private(security.credentials_file(principal), "\n".join(lines) + "\n")
    return security


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def _write_certificates(security: Security) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sagacity dev CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(subject: str) -> bytes:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name.from_rfc4514_string(subject)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
                ),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem_key = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return pem_key + cert.public_bytes(serialization.Encoding.PEM)

    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    _write_private(security.broker_pem, (leaf("CN=sagacity-broker") + ca_pem).decode())
    _write_private(security.controller_pem, (leaf(CONTROLLER_SUBJECT) + ca_pem).decode())
    security.ca_file.write_bytes(ca_pem)
