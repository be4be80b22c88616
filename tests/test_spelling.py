"""spelling.near: the names a mistyped one was meant to be, by keystrokes rather than shared parts."""

from ftcli.spelling import edits, near

REGIONS = ["us-central1", "us-east1", "us-east4", "us-east5", "asia-northeast1", "europe-north1"]


def test_keystrokes_count_not_shared_parts():
    assert edits("uscentrl1", "uscentral1") == 1 and edits("eruope", "europe") == 1  # left out; swapped
    assert near("mars-north1", REGIONS) == []  # shares "-north" and "1" with two of them, and is neither
    assert near("us-centrl1", REGIONS) == ["us-central1"]


def test_case_and_separators_are_not_the_typo():
    assert near("US_CENTRAL-1", REGIONS) == ["us-central1"]


def test_equally_near_names_are_all_given_up_to_n():
    assert near("us-east2", REGIONS) == ["us-east1", "us-east4", "us-east5"]
    assert near("us-east2", REGIONS, n=2) == []  # which one was meant is anyone's guess


def test_a_short_name_takes_one_edit_a_long_one_two():
    assert near("us-wst1", ["us-west1"]) == ["us-west1"]  # one edit in six characters
    assert near("eu-west1", ["us-west1", "europe-west1"]) == []  # two in seven; four
    assert near("us-cental", REGIONS) == ["us-central1"]  # two in eight
    assert near("", REGIONS) == []
