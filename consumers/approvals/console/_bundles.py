"""A saga's audit bundle from the archive, downloaded from its page (docs/console.md)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router

from sagacity.consumers.approvals._reads import check_readable, may_read
from sagacity.consumers.approvals.console._page import Console, SagaArchive, Viewer, page
from sagacity.errors import UnknownSagaError


def _bundle(console: Console, archive: SagaArchive, viewer: Viewer, saga_id: str) -> bytes:
    # The live chain names the saga's tools; an auditor reads a saga the topic no longer
    # holds as well.
    if not may_read(viewer.principal, console.sagacity.entries(saga_id)):
        check_readable(viewer.principal, saga_id, ())
    return archive.bundle(saga_id)


async def saga_bundle(request: Request, console: Console, viewer: Viewer) -> Response:
    """The saga's audit bundle as a zip file, for a viewer who may read the saga."""
    saga_id = request.path_params["saga_id"]
    archive = console.archive
    if archive is None:
        raise UnknownSagaError("no archive is configured for this service", saga_id=saga_id)
    data = await run_in_threadpool(_bundle, console, archive, viewer, saga_id)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in saga_id)
    return Response(
        data,
        media_type="application/zip",
        headers={"content-disposition": f'attachment; filename="audit-{safe}.zip"'},
    )


router = Router(routes=[Route("/sagas/{saga_id}/bundle", page(saga_bundle), methods=["GET"])])
