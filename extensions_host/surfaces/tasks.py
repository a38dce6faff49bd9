"""Thin Celery tasks of the conversation capabilities."""

from __future__ import annotations

from celery import shared_task

from extensions_host.surfaces.services.attention import attention_prune_expired


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=50, time_limit=60)
def prune_attention() -> None:
    """Delete expired attention items (bumping their conversations' versions)."""
    _, more = attention_prune_expired()
    if more:
        prune_attention.delay()
