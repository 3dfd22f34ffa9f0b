"""Which extra installs a module a command imports, so a missing one is named in one line."""

from __future__ import annotations

SERVICES = "services"

_EXTRA_OF = {
    "fastapi": SERVICES,
    "starlette": SERVICES,
    "uvicorn": SERVICES,
    "prometheus_client": SERVICES,
    "httpx": SERVICES,
    "jinja2": SERVICES,
    "multipart": SERVICES,
    "slack_sdk": SERVICES,
    "pydantic_ai": "pydantic-ai",
    "langchain_core": "langchain",
    "langchain": "langchain",
    "agents": "openai-agents",
    "mcp": "services,mcp",  # the MCP commands serve over HTTP too
}


def extra_for(module: str | None) -> str | None:
    """The extra providing ``module`` (or its top-level package); ``None`` if none does."""
    if not module:
        return None
    return _EXTRA_OF.get(module.partition(".")[0])


def missing_extra_message(command: str, module: str, extra: str) -> str:
    """The one line a command prints when ``module`` of ``extra`` is not installed."""
    return (
        f"`{command}` needs the [{extra}] extra ({module} is not installed): "
        f"pip install 'sagacity[{extra}]'"
    )
