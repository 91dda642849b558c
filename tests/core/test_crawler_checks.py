"""The crawl's own checks (issue 26), on canned pages: an in-page link without its section
and an absolute link off the served address are reported; right ones are not."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.crawl import Crawler

PAGES = {
    "/": '<a href="#here">here</a><a href="#gone">gone</a><section id="here"></section>'
         '<a href="/jobs/x/1/#efficiency">job</a><a href="/jobs/x/1/#gpus">per GPU</a>'
         '<a href="http://testserver/jobs/">ok</a><a href="http://127.0.0.1:8000/jobs/">old</a>'
         '<a href="https://attack.mitre.org/techniques/T1068/">ATT&amp;CK</a>'
         "<pre>Job 1: http://127.0.0.1:8000/jobs/x/1/ and http://testserver/jobs/x/2/</pre>",
    "/jobs/": "<p>list</p>",
    "/jobs/x/1/": '<section id="efficiency"></section>',
}


@dataclass
class _Answer:
    content: bytes
    status_code: int = 200
    streaming: bool = False
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/html"})

    def get(self, key: str, default: str = "") -> str:
        return self.headers.get(key, default)

    def __getitem__(self, key: str) -> str:
        return self.headers[key]


class _Client:
    def get(self, url: str) -> _Answer:
        html = PAGES.get(url.split("?")[0])
        return _Answer(b"") if html is None else _Answer(html.encode())


def test_missing_sections_and_offsite_links_are_reported():
    report = Crawler(_Client()).crawl()  # type: ignore[arg-type]
    assert sorted(report.missing_anchors) == ["/#gone (linked from /)",
                                              "/jobs/x/1/#gpus (linked from /)"]
    assert sorted(report.offsite_links) == ["http://127.0.0.1:8000/jobs/ (on /)",
                                            "http://127.0.0.1:8000/jobs/x/1/ (on /)"]
