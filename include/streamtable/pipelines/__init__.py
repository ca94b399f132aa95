"""The registry of pipelines: one short declarative module each."""

from __future__ import annotations

from ..errors import UnknownPipelineError
from ..pipeline import Pipeline
from . import (
    browser_captcha,
    call_analytics,
    clicks_per_region,
    inventory,
    play_sessions,
    presence_notifications,
    word_count,
)

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        clicks_per_region.PIPELINE,
        browser_captcha.PIPELINE,
        word_count.PIPELINE,
        inventory.PIPELINE,
        presence_notifications.PIPELINE,
        call_analytics.PIPELINE,
        play_sessions.PIPELINE,
    )
}


def get_pipeline(name: str) -> Pipeline:
    """The pipeline called `name`, or UnknownPipelineError listing the pipelines."""
    try:
        return PIPELINES[name]
    except KeyError:
        raise UnknownPipelineError(
            f"unknown pipeline {name!r}; pipelines are: {', '.join(sorted(PIPELINES))}"
        ) from None
