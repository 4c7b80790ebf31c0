"""Every API the broker serves has an authorization decision in the integration test's
tables (tests/integration/authz_expectations.py): a new API cannot be added open by
omission."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from eddy.broker.server import HANDLERS
from eddy.protocol.apis import SUPPORTED

_PATH = Path(__file__).resolve().parents[1] / "integration" / "authz_expectations.py"


def _tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("authz_expectations", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("authz_expectations", module)
    spec.loader.exec_module(module)
    return module


def test_every_handled_api_has_an_authorization_decision() -> None:
    tables = _tables()
    missing = sorted(k.name for k in HANDLERS if k not in tables.covered())
    assert missing == [], f"APIs with no entry in REFUSED or OPEN: {missing}"


def test_every_advertised_api_has_an_authorization_decision() -> None:
    tables = _tables()
    missing = sorted(k.name for k in SUPPORTED if k not in tables.covered())
    assert missing == [], f"advertised APIs with no entry in REFUSED or OPEN: {missing}"


def test_tables_name_only_served_apis_and_kafka_codes() -> None:
    tables = _tables()
    stale = sorted(k.name for k in tables.covered() if k not in HANDLERS)
    assert stale == [], f"entries for APIs the broker does not serve: {stale}"
    codes = {r.code.name for r in tables.REFUSED.values()}
    assert codes <= {"topic_authorization_failed", "group_authorization_failed",
                     "cluster_authorization_failed",
                     "transactional_id_authorization_failed"}
    assert all(why.strip() for why in tables.OPEN.values())
    assert all(r.check.strip() for r in tables.REFUSED.values())
