"""Per-conversation documents per `(extension, name)` (spec 02 §4): initial value, `max_bytes`,
fork policy copy | reset."""

from __future__ import annotations

from typing import Any

from conversations.models import Conversation, conversation_id_valid
from extensions_host.models import DocumentDeclaration, ExtensionDocument
from extensions_host.sdk import Document, Extension, StateError
from extensions_host.services.records import decode_value, encode_value


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
    if text is None:
        text = spec.initial_json()
    if len(text.encode()) > spec.max_bytes:
        raise StateError("bound", f"Document {name} exceeds max_bytes")
    return decode_value(spec.model, text, f"document {name}")


def document_write(
    *, extension_id: str, name: str, spec: Document[Any], conversation_id: str, value: Any
) -> Any:
    """Validate, bound and store a document (inside the caller's frame)."""
    check_conversation_id(conversation_id)
    encoded = encode_value(spec.model, value, f"document {name}")
    if len(encoded.encode()) > spec.max_bytes:
        raise StateError("bound", f"Document {name} exceeds max_bytes ({spec.max_bytes})")
    if not Conversation.objects.filter(pk=conversation_id).exists():
        raise StateError("bound", f"Conversation {conversation_id} does not exist")
    ExtensionDocument.objects.update_or_create(
        extension_id=extension_id,
        name=name,
        conversation_id=conversation_id,
        defaults={"value": encoded},
    )
    return spec.model.model_validate_json(encoded)


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
    """Give a forked conversation its documents: `copy` ones are copied from the parent,
    `reset` ones start from their initial value. Runs in the caller's (fork's) transaction."""
    copied = set(
        DocumentDeclaration.objects.filter(fork=DocumentDeclaration.Fork.COPY).values_list(
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
        if (doc.extension_id, doc.name) in copied
    ]
    ExtensionDocument.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
