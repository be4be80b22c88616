"""Regions and the GPUs each trains on (from Vertex's Locations page)."""

import re

import pytest

from ftcli.catalog import gpu_names
from ftcli.regions import TRAINING_GPUS, VERTEX_REGIONS, offers, regions_with


def test_regions_are_region_names_and_gpus_are_catalog_names():
    assert all(re.fullmatch(r"[a-z]+-[a-z]+\d+", r) for r in VERTEX_REGIONS)
    names = set(gpu_names())
    for region, gpus in TRAINING_GPUS.items():
        assert gpus <= names, (region, gpus - names)


@pytest.mark.parametrize(("region", "gpu", "yes"), [
    ("us-central1", "T4", True), ("us-central1", "H200", True), ("europe-west4", "B200", True),
    # marked "† not available for training" on the page
    ("europe-west6", "L4", False), ("asia-east1", "L4", False), ("me-west1", "A100-80GB", False),
    ("southamerica-west1", "T4", False), ("asia-northeast1", "A100", False),
    # not listed at all
    ("us-east5", "T4", False), ("europe-west2", "A100", False),
])
def test_offers(region, gpu, yes):
    assert offers(region, gpu) is yes


def test_cpu_only_regions_are_regions():
    assert {"europe-west6", "southamerica-west1", "africa-south1"} <= VERTEX_REGIONS
    assert not TRAINING_GPUS.get("africa-south1")


def test_nearest_regions_first():
    # europe-west2 has no A100: the European regions that have one come first
    assert regions_with("A100", "europe-west2")[0] == "europe-west4"
    near = regions_with("H200", "us-east1")
    assert near[0] == "us-east4" and all(r.startswith("us-") for r in near)
    assert regions_with("L4", "asia-east1")[0].startswith("asia-")
    assert all(offers(r, "B200") for r in regions_with("B200", "me-west1", limit=10))
    # none in Europe but europe-west4: the Americas come before Asia (it said asia-south2 second)
    assert regions_with("RTX-PRO-6000", "europe-west1", limit=2) == ["europe-west4", "us-central1"]
    assert regions_with("RTX-PRO-6000", "me-central2", limit=1) == ["europe-west4"]
