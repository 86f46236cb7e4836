"""Certificates for a sandbox server's TLS listener, made with the JDK's `keytool`: a certificate
authority of its own, and a server key pair whose certificate that authority signed for the
server's names (localhost, its address).

    authority = certificate_authority(directory / "ca", password)
    server = server_certificates(directory, password, hosts=("127.0.0.1",))
    ... ssl.keystore.location=server.keystore ...   (the server)
    ... ssl.ca.location=server.ca_pem ...           (librdkafka)
    ... ssl.truststore.location=server.truststore   (a Java client)
    client = client_certificate(directory, password, name="streamer")
    ... ssl.keystore.location=client.keystore ...   (a client the server asks for a certificate)

Every store is PKCS12 with one password. The keys are EC (P-256): a keytool run that makes an
RSA key takes half a second longer. A directory that holds the certificates already keeps them.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from streamer.errors import BrokerStartError
from streamer.sandbox.server_process import java_executable

#: A keytool run is a short JVM: start it the quick way.
KEYTOOL_OPTIONS = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC")
KEY_PAIR = {"keyalg": "EC", "groupname": "secp256r1", "validity": "3650", "storetype": "PKCS12"}


@dataclass(frozen=True)
class Authority:
    """A certificate authority: its key in `keystore`, its certificate as PEM."""

    keystore: Path
    pem: Path
    password: str = field(repr=False)


@dataclass(frozen=True)
class ServerCertificates:
    """A server's key and certificate chain (`keystore`), and its authority's certificate for the
    clients: as PEM (`ca_pem`, librdkafka's `ssl.ca.location`) and in a truststore (Java's)."""

    keystore: Path
    ca_pem: Path
    truststore: Path
    password: str = field(repr=False)

    @classmethod
    def of(cls, directory: Path, password: str) -> ServerCertificates:
        """Where `server_certificates(directory, password, ...)` puts them."""
        return cls(directory / "server.p12", directory / "ca.pem", directory / "truststore.p12", password)


@dataclass(frozen=True)
class ClientCertificate:
    """A client's key and the certificate the server's authority signed for it (`keystore`), for
    a server that asks each client for a certificate (mutual TLS). PKCS12, which librdkafka
    (`ssl.keystore.location`) and Java both read."""

    keystore: Path
    password: str = field(repr=False)


def keytool_executable() -> str:
    """The `keytool` of the JDK that runs the servers."""
    keytool = Path(java_executable()).resolve().parent / "keytool"
    if not os.access(keytool, os.X_OK):
        raise BrokerStartError(f"no keytool beside {java_executable()}: install a full JDK or JRE (Java 17 or 21)")
    return str(keytool)


def certificate_authority(directory: Path, password: str, name: str = "mor-streamer sandbox CA") -> Authority:
    """A certificate authority in `directory` (`ca.p12`, `ca.pem`), made unless there already."""
    authority = Authority(directory / "ca.p12", directory / "ca.pem", password)
    if authority.pem.is_file():
        return authority
    directory.mkdir(parents=True, exist_ok=True)
    authority.keystore.unlink(missing_ok=True)  # left by a run that stopped half-way
    keystore = str(authority.keystore)
    _keytool("genkeypair", password, alias="ca", dname=f"CN={name}", ext="bc:c", keystore=keystore, **KEY_PAIR)
    _keytool("exportcert", password, "-rfc", alias="ca", keystore=keystore, file=str(authority.pem))
    return authority


def server_certificates(directory: Path, password: str, hosts: Sequence[str]) -> ServerCertificates:
    """A server key pair in `directory/server.p12` whose certificate an authority of its own
    (`directory/ca.pem`, also in `directory/truststore.p12`) signed for localhost and `hosts`;
    made unless there already."""
    made = ServerCertificates.of(directory, password)
    if made.truststore.is_file():  # the last one made
        return made
    directory.mkdir(parents=True, exist_ok=True)
    for stale in (made.keystore, made.truststore):
        stale.unlink(missing_ok=True)
    names = ",".join(_subject_alternative_name(host) for host in dict.fromkeys(("localhost", "127.0.0.1", *hosts)))
    keystore = str(made.keystore)
    with ThreadPoolExecutor(max_workers=1) as meanwhile:  # each keytool is a JVM: two at a time
        authority_made = meanwhile.submit(certificate_authority, directory, password)
        _keytool("genkeypair", password, alias="server", dname="CN=localhost", keystore=keystore, **KEY_PAIR)
        request = _keytool("certreq", password, alias="server", keystore=keystore)
        authority = authority_made.result()
        chain = _signed_chain(authority, request, directory / "server-chain.pem", f"SAN={names}", "eku=serverAuth")
        trusting = meanwhile.submit(
            _keytool,
            "importcert",
            password,
            "-noprompt",
            alias="ca",
            file=str(authority.pem),
            keystore=str(made.truststore),
            storetype="PKCS12",
        )
        _keytool("importcert", password, "-noprompt", alias="server", file=str(chain), keystore=keystore)
        trusting.result()
    return made


def client_certificate(directory: Path, password: str, name: str) -> ClientCertificate:
    """A client key pair in `directory/client-<name>.p12` whose certificate (CN=`name`, for client
    authentication) the authority of `server_certificates(directory, ...)` signed; made unless
    there already."""
    made = ClientCertificate(directory / f"client-{name}.p12", password)
    if made.keystore.is_file():
        return made
    authority = certificate_authority(directory, password)
    making = made.keystore.with_suffix(".making")  # renamed when whole: a run stopped half-way leaves no store
    making.unlink(missing_ok=True)
    keystore = str(making)
    _keytool("genkeypair", password, alias="client", dname=f"CN={name}", keystore=keystore, **KEY_PAIR)
    request = _keytool("certreq", password, alias="client", keystore=keystore)
    chain = _signed_chain(authority, request, directory / f"client-{name}-chain.pem", "eku=clientAuth")
    _keytool("importcert", password, "-noprompt", alias="client", file=str(chain), keystore=keystore)
    making.rename(made.keystore)
    return made


def _signed_chain(authority: Authority, request: str, chain: Path, *extensions: str) -> Path:
    """`chain`, written with the certificate the authority signed for a certificate `request`,
    then the authority's own: the reply keytool installs into the requester's keystore."""
    certificate = _keytool(
        "gencert",
        authority.password,
        "-rfc",
        stdin=request,
        alias="ca",
        keystore=str(authority.keystore),
        validity=KEY_PAIR["validity"],
        ext=extensions,
    )
    chain.write_text(certificate + authority.pem.read_text())
    return chain


def _subject_alternative_name(host: str) -> str:
    try:
        return f"ip:{ipaddress.ip_address(host)}"
    except ValueError:
        return f"dns:{host}"


def _keytool(command: str, password: str, *flags: str, stdin: str | None = None, **options: str | Sequence[str]) -> str:
    """`keytool -<command> <flags>` with `-<option> <value>` for each option (once per value of a
    sequence): its output. A failure raises with keytool's own words."""
    args = [f"-{command}", *flags]
    for name, value in options.items():
        for each in [value] if isinstance(value, str) else value:
            args += [f"-{name}", each]
    done = subprocess.run(
        [keytool_executable(), *KEYTOOL_OPTIONS, *args, "-storepass", password],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise BrokerStartError(
            f"keytool -{command} failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-2000:]}"
        )
    return done.stdout
