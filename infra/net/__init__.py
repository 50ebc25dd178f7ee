"""Outbound HTTP: one layer (:class:`Egress`) that checks offline mode and records every request."""

from infra.net.egress import Egress, EgressLedger, EgressRecord, OfflineError

__all__ = ["Egress", "EgressLedger", "EgressRecord", "OfflineError"]
