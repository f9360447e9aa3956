"""``python -m services.api``: serve the API and the desk (settings from the environment).

``python -m services.api hash-password`` prints a reviewer password hash for ``REVIEWERS``;
``python -m services.api openapi`` prints the OpenAPI document.
"""

from __future__ import annotations

import getpass
import json
import sys

import typer

from services.api.passwords import DEFAULT_ITERATIONS, MIN_ITERATIONS, hash_password

cli = typer.Typer(add_completion=False, no_args_is_help=False)


@cli.callback(invoke_without_command=True)
def main(ctx: typer.Context) -> None:
    """Serve the intake API and the review desk (the default command)."""
    if ctx.invoked_subcommand is None:
        serve()


@cli.command()
def serve() -> None:
    """Serve on API_HOST:API_PORT until SIGTERM."""
    from refund_bench.service import configure_logging
    from services.api.server import serve as run
    from services.api.settings import ApiSettings

    settings = ApiSettings()
    configure_logging(settings.log_level)
    run(settings)


@cli.command()
def openapi() -> None:
    """Print the OpenAPI document, as ``/openapi.json`` serves it when API_DOCS is on (the
    settings that shape it, such as MAX_COMPLAINT_CHARS, from the environment)."""
    from pydantic import SecretStr

    from services.api.app import openapi_document
    from services.api.settings import ApiSettings

    # The document does not depend on the session secret; a placeholder lets it be built
    # where none is set.
    settings = ApiSettings(session_secret=SecretStr("openapi-document-only-" + "x" * 32))
    typer.echo(json.dumps(openapi_document(settings), indent=2))


@cli.command("hash-password")
def hash_password_command(
    stdin: bool = typer.Option(False, "--stdin", help="Read the password from standard input."),
    iterations: int = typer.Option(
        DEFAULT_ITERATIONS, min=MIN_ITERATIONS, help="PBKDF2 iterations."
    ),
) -> None:
    """Print a PBKDF2-SHA256 hash for REVIEWERS (``name:<hash>``). The password is not echoed."""
    if stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            typer.echo("passwords differ", err=True)
            raise typer.Exit(1)
    if len(password) < 8:
        typer.echo("use at least 8 characters", err=True)
        raise typer.Exit(1)
    typer.echo(hash_password(password, iterations=iterations))


if __name__ == "__main__":
    cli()
