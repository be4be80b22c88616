"""Vertex AI regions and the GPUs each one offers for custom training. Plain data, no google import.

Source: "Vertex AI locations", https://docs.cloud.google.com/vertex-ai/docs/general/locations (page last
updated 2026-04-10; read 2026-11-26), table "Available accelerators per region". Entries that the page marks
"† not available for training" are left out here (e.g. europe-west6 lists only L4†, so no GPU trains there);
entries marked only "*" (not for inference) or "‡" (not for Workbench notebooks) are in: e.g. every RTX PRO 6000,
"us-east1 ... RTX PRO 6000 ‡" (its six rows re-read 2026-11-27). The page also lists regions for custom training
that have no GPUs at all (the second set below): CPU jobs run there.

The region set as a whole (both sets together, 39 regions) is exactly gcloud's own list of "Available regions
specifically for training, including custom-jobs and hp-tuning-jobs", SUPPORTED_TRAINING_REGIONS in Google Cloud SDK's
lib/googlecloudsdk/command_lib/ai/constants.py (as mirrored in https://github.com/google-cloud-sdk-unofficial/
google-cloud-sdk, commit 01f043c2; read 2026-11-28), which gcloud keeps as a fallback for its region lookups.
"""

from __future__ import annotations

# Short GPU names as the catalog spells them (T4, A100-80GB, H100-MEGA, ...).
TRAINING_GPUS: dict[str, frozenset[str]] = {r: frozenset(g.split()) for r, g in {
    "asia-east1": "P100 T4 V100 H100-MEGA",
    "asia-east2": "T4",
    "asia-northeast1": "H100 H100-MEGA B200 T4",
    "asia-northeast3": "A100 H100 L4 T4",
    "asia-south1": "H100 L4 T4 H200",
    # Documented as ambiguous: the Locations page's (above) accelerator table lists H200 here, while its feature
    # table has no asia-south2 row (read 2026-11-27); kept as the accelerator table says.
    "asia-south2": "H200 RTX-PRO-6000",
    "asia-southeast1": "A100 A100-80GB B200 H100 H100-MEGA L4 P4 T4 RTX-PRO-6000",
    "asia-southeast2": "T4",
    "australia-southeast1": "H100-MEGA P4 T4",
    "europe-central2": "T4",
    "europe-north1": "H100-MEGA",
    "europe-west1": "H100 H100-MEGA H200 P100 T4",
    "europe-west2": "H100 L4 T4",
    "europe-west3": "H100 H100-MEGA T4",
    "europe-west4": "A100 A100-80GB H100 H100-MEGA H200 B200 L4 P4 T4 V100 P100 RTX-PRO-6000",
    "me-central2": "L4",
    "me-west1": "A100",
    "northamerica-northeast1": "P4 T4",
    "northamerica-northeast2": "H100 L4",
    "southamerica-east1": "T4",
    "us-central1": "A100 A100-80GB B200 H100 H100-MEGA H200 L4 P4 P100 T4 V100 RTX-PRO-6000",
    "us-east1": "A100 B200 L4 P100 T4 V100 RTX-PRO-6000",
    "us-east4": "A100-80GB H100 H100-MEGA H200 B200 L4 P4 T4 RTX-PRO-6000",
    "us-east5": "A100-80GB H100 H100-MEGA H200",
    "us-south1": "B200 H200",
    "us-west1": "H100 H100-MEGA H200 L4 P100 T4 V100",
    "us-west2": "P4 T4 B200",
    "us-west3": "A100 B200",
    "us-west4": "A100 H100 H100-MEGA T4",
}.items()}

_CPU_ONLY = frozenset({
    "africa-south1", "asia-northeast2", "australia-southeast2", "europe-southwest1", "europe-west6", "europe-west8",
    "europe-west9", "europe-west12", "me-central1", "southamerica-west1",
})

VERTEX_REGIONS: frozenset[str] = frozenset(TRAINING_GPUS) | _CPU_ONLY

# Coarse geography for "the nearest regions that have it": the same area first, then the other areas from the
# nearest (Europe's next neighbour is the Middle East, then the Americas, not Asia; an RTX PRO 6000 asked for in
# europe-west1 suggested asia-south2 before us-central1).
_AREAS = (("us", "northamerica", "southamerica"), ("europe",), ("asia", "australia"), ("me", "africa"))
_NEXT_AREAS = {0: (0, 1, 2, 3), 1: (1, 3, 0, 2), 2: (2, 3, 0, 1), 3: (3, 1, 2, 0)}


def _area(region: str) -> int:
    head = region.split("-", 1)[0]
    return next((i for i, heads in enumerate(_AREAS) if head in heads), len(_AREAS))


def _distance(home: int, area: int) -> int:
    """How far `area` is from `home` in that order (0: the same area); unknown areas last."""
    order = _NEXT_AREAS.get(home, ())
    return order.index(area) if area in order else len(_AREAS)


def offers(region: str, gpu: str) -> bool:
    return gpu in TRAINING_GPUS.get(region, frozenset())


def regions_with(gpu: str, near: str, limit: int = 3) -> list[str]:
    """Up to `limit` regions that train on `gpu`, those in `near`'s part of the world first."""
    have = [r for r, gpus in TRAINING_GPUS.items() if gpu in gpus]
    home = _area(near)
    prefix = near.rstrip("0123456789")  # us-east4 -> us-east: neighbours sort first within the area
    have.sort(key=lambda r: (_distance(home, _area(r)), not r.startswith(prefix), r))
    return have[:limit]
