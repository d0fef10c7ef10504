"""A real SMTP server (aiosmtpd) for the trainwarden-notify delivery tests.

Usage: smtp_server.py PORT MODE CERT KEY USER PASSWORD
  MODE: starttls (STARTTLS required before MAIL) or implicit (TLS from the first byte).
  USER/PASSWORD: the only credentials accepted (AUTH required); "-" for no authentication.

Prints "READY" once listening ("PORT-TAKEN ..." and exits 3 when the port is in use), then one JSON object per received message on stdout: the decoded
"subject", "from", "to", "content_type", "text" and "html" parts, and the envelope ("mail_from",
"rcpt_tos"), the raw "data", the "auth_login" used and whether the session was "tls". Exits when stdin closes (the test process ended).
"""

import email
import email.policy
import json
import logging
import ssl
import sys
import warnings

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def main() -> None:
    # aiosmtpd's own chatter (the implicit-TLS AUTH note, a deprecation inside aiosmtpd) is not test output.
    logging.getLogger("mail.log").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    port, mode, cert, key, user, password = sys.argv[1:7]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            auth = session.auth_data
            login = auth.login.decode() if isinstance(auth, LoginPassword) else None
            message = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
            text = message.get_body(preferencelist=("plain",))
            html = message.get_body(preferencelist=("html",))
            record = {
                "subject": str(message["subject"]),
                "from": str(message["from"]),
                "to": str(message["to"]),
                "content_type": message.get_content_type(),
                "text": text.get_content() if text is not None else None,
                "html": html.get_content() if html is not None else None,
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "data": envelope.content.decode("utf-8", "replace"),
                "auth_login": login,
                # session.ssl is set by STARTTLS; an implicit-TLS connection shows on the transport.
                "tls": session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None,
            }
            print(json.dumps(record), flush=True)
            return "250 Message accepted for delivery"

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == user
            and auth_data.password.decode() == password
        )
        # handled=False: aiosmtpd itself answers (235, or 535 on a wrong password).
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    kwargs = dict(hostname="127.0.0.1", port=int(port), server_hostname="localhost")
    if user != "-":
        kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=True)
    if mode == "starttls":
        kwargs.update(tls_context=context, require_starttls=True)
    elif mode == "implicit":
        # aiosmtpd only counts STARTTLS as TLS for auth_require_tls (and warns); this connection is TLS from
        # its first byte.
        warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
        kwargs.update(ssl_context=context, auth_require_tls=False)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    controller = Controller(Handler(), **kwargs)
    try:
        controller.start()
    except OSError as e:
        # The port the test picked was taken in the meantime: it picks another and starts us again.
        print(f"PORT-TAKEN {e}", flush=True)
        raise SystemExit(3)
    print("READY", flush=True)
    try:
        sys.stdin.read()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
