"""One rule maps a refusal to its HTTP status, for the API and the console alike: the same
error never answers one status on ``/v1`` and another on ``/ui``."""

from __future__ import annotations

import inspect

import pytest

from sagacity import errors


def _families() -> list[type[errors.SagacityError]]:
    return sorted(
        (
            cls
            for _name, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.SagacityError)
        ),
        key=lambda cls: cls.__name__,
    )


def _made(cls: type[errors.SagacityError]) -> errors.SagacityError:
    try:
        return cls("x")
    except TypeError:  # an error with required structured attributes
        made = cls.__new__(cls)
        errors.SagacityError.__init__(made, "x")
        return made


@pytest.mark.parametrize("family", _families(), ids=lambda cls: cls.__name__)
def test_an_error_answers_the_same_status_in_the_api_and_the_console(
    family: type[errors.SagacityError],
) -> None:
    from sagacity.consumers.approvals import _api
    from sagacity.consumers.approvals.console import _page, _signin

    api_status, console_status = _api.status_for, _page.status_for

    error = _made(family)
    assert console_status(error) == api_status(error)
    assert _signin.status_for(error) == api_status(error)  # sign-in's refusals too
