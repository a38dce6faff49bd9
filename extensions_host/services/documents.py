"""Per-conversation documents per `(extension, name)` (spec 02 §4): initial value, `max_bytes`,
fork policy copy | reset."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from conversations.models import Conversation, conversation_id_valid
from extensions_host.models import DocumentDeclaration, ExtensionDocument
from extensions_host.sdk import Document, Extension, StateError
from extensions_host.services.records import decode_value, encode_value

# the value of a row inserted to be locked, never committed: no stored JSON is empty
PLACEHOLDER = ""


def check_conversation_id(value: Any) -> str:
    if not conversation_id_valid(value):
        raise StateError("bound", "Conversation id is invalid")
    return value


def document_spec(definition: Extension, name: str) -> Document[Any]:
    spec = definition.documents.get(name)
    if spec is None:
        raise StateError("bound", f"Document {name} is not declared")
    return spec


def document_read(
    *, extension_id: str, name: str, spec: Document[Any], conversation_id: str
) -> Any:
    """The stored document, or the declared initial value."""
    check_conversation_id(conversation_id)
    text = (
        ExtensionDocument.objects.filter(
            extension_id=extension_id, name=name, conversation_id=conversation_id
        )
        .values_list("value", flat=True)
        .first()
    )
    return _decoded(name, spec, text)


def document_update(
    *,
    extension_id: str,
    name: str,
    spec: Document[Any],
    conversation_id: str,
    fn: Callable[[Any], Any],
) -> Any:
    """Store `fn(current)` (inside the caller's frame). The row is locked before it is read, so
    concurrent updates of one document run one after the other and none is lost."""
    check_conversation_id(conversation_id)
    document = _locked(extension_id, name, conversation_id)
    if document is not None:
        return _apply(name, spec, document, fn)
    # The first write: insert a placeholder row to lock (a concurrent first writer waits for it
    # instead of also reading the initial value). The savepoint ends with the placeholder
    # overwritten or rolls it back, so it is never committed.
    with transaction.atomic():
        if Conversation.objects.filter(pk=conversation_id).exists():
            ExtensionDocument.objects.bulk_create(
                [
                    ExtensionDocument(
                        extension_id=extension_id,
                        name=name,
                        conversation_id=conversation_id,
                        value=PLACEHOLDER,
                    )
                ],
                ignore_conflicts=True,
            )
            document = _locked(extension_id, name, conversation_id)
        if document is None:  # no such conversation (or it was deleted meanwhile)
            raise StateError("bound", f"Conversation {conversation_id} does not exist")
        return _apply(name, spec, document, fn)


def _locked(extension_id: str, name: str, conversation_id: str) -> ExtensionDocument | None:
    return (
        ExtensionDocument.objects.select_for_update(no_key=True)
        .filter(extension_id=extension_id, name=name, conversation_id=conversation_id)
        .first()
    )


def _apply(
    name: str, spec: Document[Any], document: ExtensionDocument, fn: Callable[[Any], Any]
) -> Any:
    current = _decoded(name, spec, document.value)
    encoded = encode_value(spec.model, fn(current), f"document {name}")
    if len(encoded.encode()) > spec.max_bytes:
        raise StateError("bound", f"Document {name} exceeds max_bytes ({spec.max_bytes})")
    document.value = encoded
    document.save(update_fields=["value", "updated_at"])
    return spec.model.model_validate_json(encoded)


def _decoded(name: str, spec: Document[Any], text: str | None) -> Any:
    """A stored text as the document's model; none stored (or the placeholder of a first write
    in progress, which `fn` may read): the initial value. `max_bytes` bounds writes only: a
    document stored before a version lowered it still reads, so that version can shrink it."""
    if text is None or text == PLACEHOLDER:
        text = spec.initial_json()
    return decode_value(spec.model, text, f"document {name}")


def documents_declare(*, extension_id: str, documents: dict[str, Document[Any]]) -> None:
    """Record the declared documents (sync_roster); stored documents of names no longer
    declared are kept, only their declaration goes."""
    for name, spec in documents.items():
        DocumentDeclaration.objects.update_or_create(
            extension_id=extension_id,
            name=name,
            defaults={
                "initial": spec.initial_json(),
                "max_bytes": spec.max_bytes,
                "fork": spec.fork,
            },
        )
    DocumentDeclaration.objects.filter(extension_id=extension_id).exclude(
        name__in=list(documents)
    ).delete()


def documents_fork(*, parent_id: str, child_id: str) -> int:
    """Give a forked conversation its documents: the parent's are copied, except those declared
    `reset`, which start from their initial value. A stored document no version declares now
    (its declaration dropped, or its extension uninstalled) is copied, as `copy` is the default:
    a later version that declares it again finds it in the fork as in the parent. Runs in the
    caller's (fork's) transaction."""
    reset = set(
        DocumentDeclaration.objects.filter(fork=DocumentDeclaration.Fork.RESET).values_list(
            "extension_id", "name"
        )
    )
    rows = [
        ExtensionDocument(
            extension_id=doc.extension_id,
            name=doc.name,
            conversation_id=child_id,
            value=doc.value,
        )
        for doc in ExtensionDocument.objects.filter(conversation_id=parent_id).iterator()
        if (doc.extension_id, doc.name) not in reset
    ]
    ExtensionDocument.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
