"""Staff console: secrets (keys and "set", never values; staff set, replace and delete them
write-only), settings (validated JSON), notifications and notifier health (read-only), the
audit log (read-only), and users (deletion only with a transfer target; the plain cascade
delete is disabled)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables

from core.admin import BigTableAdmin, ReadOnlyAdmin
from core.admin_filters import recent_filter, value_filter
from core.errors import HostError
from core.models import AuditEntry
from extensions_host.admin import ExtensionIdFilter
from extensions_host.background.admin import ms_column
from extensions_host.contributions.models import (
    ExtensionSecret,
    ExtensionSettings,
    Notification,
    NotificationDelivery,
    NotifierHealth,
)
from extensions_host.contributions.services.stores import (
    keyring,
    secret_edit,
    secret_key_check,
    secret_value_check,
    settings_edit,
)
from extensions_host.contributions.services.users import user_delete
from extensions_host.sdk import StateError

# Every action the audit log records (the `action` of `audit_record` calls, and `host.<call>`
# for the host API's), the choices of the audit list's filter. The log's own column would give
# them only by a DISTINCT over every entry; tests/console/test_bounded_lists.py fails when a
# service audits an action missing here.
AUDIT_ACTIONS: tuple[str, ...] = (
    # staff and the host on extensions
    "extension_stopped",
    "extension_resumed",
    "extension_auto_resumed",
    "extension_grants_admitted",
    "extension_limits_changed",
    "extension_purged",
    "extension_secret_set",
    "extension_secret_deleted",
    "extension_settings_edited",
    "job_triggered",
    # users, tokens and the demo set-up
    "user_deleted",
    "token_created",
    "token_revoked",
    "demo_setup",
    # extensions through the host API (`ctx.host`)
    "host.conversations.create",
    "host.conversations.submit",
    "host.conversations.list",
    "host.conversations.meta",
    "host.conversations.watch",
    "host.users.list",
    "host.users.get",
    "host.access.access_of",
    "host.identity.acting_user",
    "host.interactions.seed",
    "host.interactions.answer",
    "host.interactions.settle",
    "host.interactions.snapshot",
    "host.ambient.set",
    "host.ambient.clear",
)


class SecretForm(forms.ModelForm):
    """Which extension and key (on the add page), and the value: write-only, never rendered
    back (not even after an error), stored exactly as typed, encrypted by the stores service."""

    value = forms.CharField(
        label="New value",
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: encrypted at rest and never shown again. Saving replaces the "
        "current value.",
    )

    class Meta:
        model = ExtensionSecret
        fields = ["extension", "key"]

    def clean_key(self) -> str:
        return _bound(secret_key_check, self.cleaned_data["key"])

    @sensitive_variables()
    def clean_value(self) -> str:
        return _bound(secret_value_check, self.cleaned_data["value"])


@sensitive_variables()
def _bound(check: Any, value: Any) -> Any:
    """`check(value)`, its StateError shown as the field's error."""
    try:
        return check(value)
    except StateError as exc:
        raise forms.ValidationError(exc.message) from exc


@admin.register(ExtensionSecret)
class ExtensionSecretAdmin(admin.ModelAdmin):
    """Which secrets exist, and under which key; the value (and its ciphertext) never. Staff
    with the model's permissions set, replace or delete one through `secret_edit` (encrypted,
    audited with the key only)."""

    form = SecretForm
    list_display = ["extension", "key", "is_set", "encryption", "updated_at"]
    list_filter = ["extension"]
    search_fields = ["key"]
    shown_fields = ["extension", "key", "is_set", "encryption", "created_at", "updated_at"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ("extension", "key", "value")
        # the value input only for those who may replace it (a view-only page has no form)
        writable = self.has_change_permission(request, obj)
        return (*self.shown_fields, "value") if writable else tuple(self.shown_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.shown_fields if obj is not None else []

    @method_decorator(sensitive_post_parameters("value"))
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # error reports (a 500 in this view) leave the typed value out
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # through the service: the same checks and encryption as `ctx.stores.secrets.set`
        secret_edit(
            extension_id=obj.extension_id,
            key=obj.key,
            value=form.cleaned_data["value"],
            actor=request.user.get_username(),
        )
        obj.pk = (
            ExtensionSecret.objects.filter(extension_id=obj.extension_id, key=obj.key)
            .values_list("pk", flat=True)
            .get()
        )

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        secret_edit(
            extension_id=obj.extension_id,
            key=obj.key,
            value=None,
            actor=request.user.get_username(),
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    @admin.display(description="value")
    def is_set(self, obj: ExtensionSecret) -> str:
        return "set"

    @admin.display(description="encryption")
    def encryption(self, obj: ExtensionSecret) -> str:
        _, current, old = keyring()
        if obj.key_id == current:
            return "current key"
        return "old key (run secrets_reencrypt)" if obj.key_id in old else "unknown key"


class SettingsForm(forms.ModelForm):
    value = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "cols": 80}),
        help_text="A JSON object; validated against the extension's settings model.",
    )

    class Meta:
        model = ExtensionSettings
        fields = ["extension", "value"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["value"] = json.dumps(self.instance.value, indent=2, sort_keys=True)

    def clean_value(self) -> Any:
        try:
            return json.loads(self.cleaned_data["value"])
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc.msg}") from exc

    def clean(self) -> dict[str, Any]:
        from extensions_host.contributions.services.stores import settings_validate

        cleaned = super().clean() or {}
        extension = cleaned.get("extension") or getattr(self.instance, "extension", None)
        if extension is not None and "value" in cleaned:
            try:
                settings_validate(extension_id=extension.pk, value=cleaned["value"])
            except HostError as exc:
                problems = [
                    f"{field}: {'; '.join(map(str, errors))}"
                    for field, errors in (exc.details or {}).items()
                ]
                raise forms.ValidationError(problems or exc.message) from exc
        return cleaned


@admin.register(ExtensionSettings)
class ExtensionSettingsAdmin(admin.ModelAdmin):
    form = SettingsForm
    list_display = ["extension", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["extension"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # through the service: validated again, stored and audited
        settings_edit(
            extension_id=obj.extension_id, value=obj.value, actor=request.user.get_username()
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["created_at", "type", "user", "conversation_id", "job_id", "title"]
    list_filter = ["type"]
    search_fields = ["title", "user", "conversation_id", "job_id"]


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["notification", "extension_id", "notifier", "status", "attempts", "last_error"]
    list_filter = ["status", ExtensionIdFilter]
    exclude = ["next_attempt_at", "delivered_at"]
    readonly_fields = ["next_attempt", "delivered"]

    next_attempt = ms_column("next_attempt_at", "next attempt at (UTC)")
    delivered = ms_column("delivered_at", "delivered at (UTC)")


@admin.register(NotifierHealth)
class NotifierHealthAdmin(ReadOnlyAdmin):
    list_display = [
        "extension_id",
        "notifier",
        "status",
        "consecutive_failures",
        "failed_deliveries",
        "delivered",
        "last_error",
    ]
    list_filter = ["status"]
    exclude = ["last_failure_at", "last_success_at"]
    readonly_fields = ["last_failure", "last_success"]

    last_failure = ms_column("last_failure_at", "last failure at (UTC)")
    last_success = ms_column("last_success_at", "last success at (UTC)")


@admin.register(AuditEntry)
class AuditEntryAdmin(BigTableAdmin, ReadOnlyAdmin):
    """The append-only audit log: staff actions, extension stops and auto-resumes."""

    list_display = ["at", "actor", "action", "target"]
    list_filter = [recent_filter("at", title="time"), value_filter("action", lambda: AUDIT_ACTIONS)]
    search_fields = ["actor", "action", "target"]
    fields = ("at", "actor", "action", "target", "detail")
    readonly_fields = fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- users: deletion only with a transfer target -------------------------------------------------

User = get_user_model()


class TransferForm(forms.Form):
    transfer_to = forms.ModelChoiceField(
        queryset=User.objects.none(),
        required=True,
        help_text="Their conversations move to this user.",
    )

    def __init__(self, *args: Any, exclude: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["transfer_to"].queryset = (  # type: ignore[attr-defined]
            User.objects.filter(is_active=True)
            .exclude(pk=exclude)
            .exclude(username__startswith="ext:")
            .order_by("username")
        )


if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class HostUserAdmin(UserAdmin):
    """Django's user admin without cascade deletion: "Delete with transfer" instead."""

    actions = ["delete_with_transfer"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # plain cascade deletion of users is disabled (spec 05)

    @admin.action(description="Delete user (transfer their conversations)", permissions=["change"])
    def delete_with_transfer(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> TemplateResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one user to delete.", messages.ERROR)
            return None
        user = queryset.get()
        form = TransferForm(
            request.POST if request.POST.get("confirm") == "yes" else None, exclude=user.pk
        )
        if form.is_bound and form.is_valid():
            try:
                result = user_delete(
                    user_id=user.pk,
                    transfer_to_id=form.cleaned_data["transfer_to"].pk,
                    actor=request.user.get_username(),
                )
            except HostError as exc:
                self.message_user(request, exc.message, messages.ERROR)
                return None
            self.message_user(
                request,
                f"Deleted {result['user']}: {result['conversations']} conversation(s) moved to "
                f"{result['transfer_to']}, {result['tokens_revoked']} token(s) revoked.",
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": f"Delete user {user.get_username()}",
            "user_to_delete": user,
            "form": form,
            "opts": self.model._meta,
            "queryset": queryset,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/ext_contributions/delete_user.html", context)
