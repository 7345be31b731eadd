"""A job listing's tag filter that no job's tag can match is a typo, answered 422 naming it, not an
empty listing (docs/api.md; QA28 for a filter without a key). QA29: a key or value longer than a
tag's may be (128 and 256 characters) listed no job, 200, as if the tenant had none."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from api_harness import ApiClient, http_spec
from api_harness import api as api  # the fixture

from punctual.models import MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS

LONG_KEY = "k" * (MAX_TAG_KEY_CHARS + 1)
LONG_VALUE = "v" * (MAX_TAG_VALUE_CHARS + 1)


@pytest.mark.parametrize(
    ("tag", "said"),
    [
        (LONG_KEY, f"at most {MAX_TAG_KEY_CHARS}"),
        (f"{LONG_KEY}=v", f"at most {MAX_TAG_KEY_CHARS}"),
        (f"team={LONG_VALUE}", f"at most {MAX_TAG_VALUE_CHARS}"),
        ("=data", "has no key"),
        # QA31: an empty one (a script's ?tag=$TAG with TAG unset) listed every job, unfiltered, as
        # no filter at all, where an empty state= is 422 and the CLI refuses --tag ''
        ("", "has no key"),
    ],
)
def test_a_tag_filter_longer_than_any_tag_is_refused_naming_it(api: ApiClient, tag: str, said: str) -> None:
    api.create(http_spec(tags={"team": "data"}))
    reply = api.call("GET", f"/v1/jobs?tag={quote(tag, safe='')}")
    assert reply.status == 422, reply
    assert reply.fields() == ["tag"] and said in reply.problem["detail"], reply.problem


def test_filters_at_the_limits_still_list(api: ApiClient) -> None:
    key, value = "k" * MAX_TAG_KEY_CHARS, "v" * MAX_TAG_VALUE_CHARS
    made = api.create(http_spec(tags={key: value}))
    for tag in (key, f"{key}={value}", f"{key}=v=x"):  # (a value may hold '=')
        reply = api.call("GET", f"/v1/jobs?tag={quote(tag, safe='')}")
        assert reply.status == 200, reply
        assert [job["id"] for job in reply.body["items"]] == ([made["id"]] if "=v=" not in tag else [])
