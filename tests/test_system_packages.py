"""tests/system_packages.py: what CI (``POLYRL_REQUIRE_SYSTEM=1``) may not skip."""

import pytest
import system_packages


def test_a_missing_hub_package_skips_its_tests_on_a_users_machine(monkeypatch):
    monkeypatch.setattr(system_packages, "REQUIRED", False)
    with pytest.raises(pytest.skip.Exception, match=r"installed by scripts/setup\.sh"):
        system_packages.hub_package("no_such_hub_package_v", "installed by scripts/setup.sh")


def test_a_missing_hub_package_fails_its_tests_where_ci_requires_every_package(monkeypatch):
    monkeypatch.setattr(system_packages, "REQUIRED", True)
    with pytest.raises(ModuleNotFoundError, match="no_such_hub_package_v"):
        system_packages.hub_package("no_such_hub_package_v", "installed by scripts/setup.sh")


def test_a_present_hub_package_is_the_module_itself():
    assert system_packages.hub_package("json", "stdlib").dumps([1]) == "[1]"
