"""The service principal's user is kept per process, and forgotten when it is deleted."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from core.auth import SERVICE_USERNAME, service_user

pytestmark = pytest.mark.django_db


def test_the_service_user_is_created_once_then_kept(django_assert_num_queries):
    first = service_user()
    with django_assert_num_queries(0):
        assert service_user() == first
    assert get_user_model().objects.filter(username=SERVICE_USERNAME).count() == 1


def test_a_deleted_service_user_is_forgotten_and_created_again():
    first = service_user()
    first.delete()

    again = service_user()

    assert again.pk != first.pk
    assert get_user_model().objects.filter(pk=again.pk).exists()
