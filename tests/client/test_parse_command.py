"""``icecrawler parse``: JSON lines + summary, exit codes, sniffing, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icecrawler_cli.cli import main
from sandbox.samples import mbloglist_chunk, mobile_timeline
from tests.client._util import FIXTURES


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, object]], str]:
    code = main(["parse", *argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


def test_items_then_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = run(capsys, "--source", "jd", str(FIXTURES / "jd_page0.jsonp"), "--now", "2024-12-03T00:00:00")
    *items, summary = lines
    assert code == 0 and len(items) == 3 and items[0]["id"] == "21739216866"
    assert summary["summary"] is True and summary["items"] == 3 and summary["total_pages"] == 3
    assert summary["outcome"] == "Ok" and "page=1" in str(summary["next"])
    assert summary["task"] == "reviews:jd:100012043978"  # productId sniffed from the body


def test_classified_ban_page_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = run(capsys, "--source", "weibo_pc", str(FIXTURES / "weibo_pc_busy_gbk.html"))
    assert code == 0 and lines[-1]["outcome"] == "Busy" and lines[-1]["items"] == 0


def test_status_flag_classifies(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = run(
        capsys,
        "--source",
        "weibo_mobile",
        str(FIXTURES / "weibo_mobile_ok0.json"),
        "--status",
        "429",
        "--retry-after",
        "30",
    )
    assert code == 0 and lines[-1]["outcome"] == "RateLimited" and lines[-1]["retry_after_s"] == 30.0


def test_garbage_exits_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x00\x01\x02 not json")
    code, lines, _ = run(capsys, "--source", "jd", str(path))
    assert code == 1 and lines[-1]["outcome"] == "ParseError"


def test_sniffing_weibo_uid_and_pc_last_chunk(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "m.json").write_bytes(mobile_timeline(5612345678))
    code, lines, _ = run(capsys, "--source", "weibo_mobile", str(tmp_path / "m.json"), "--now", "2021-07-06T12:00")
    assert code == 0 and lines[-1]["task"] == "user:weibo_mobile:5612345678" and lines[-1]["items"] == 10
    assert lines[-1]["cursor"] != "" and "page=2" in str(lines[-1]["next"])
    (tmp_path / "pc.json").write_bytes(mbloglist_chunk(1163218074, 1, 2, count_page=18))
    code, lines, _ = run(capsys, "--source", "weibo_pc", str(tmp_path / "pc.json"))
    assert code == 0 and lines[-1]["total_pages"] == 18 and "page=2" in str(lines[-1]["next"])


def test_weibo_pc_page_from_the_pager_and_task_params(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A company page's chunk (domain 100206) of page 2: the page is read from its pager, the domain comes from
    ``--param`` (the next request is built from the task's), and a malformed ``--param`` is refused."""
    (tmp_path / "pc.json").write_bytes(mbloglist_chunk(1163218074, 2, 2, count_page=18, domain="100206"))
    code, lines, _ = run(capsys, "--source", "weibo_pc", str(tmp_path / "pc.json"), "--param", "domain=100206")
    assert code == 0 and lines[-1]["total_pages"] == 18
    next_url = str(lines[-1]["next"])
    assert "domain=100206" in next_url and "id=1002061163218074&page=3&pre_page=2" in next_url
    code, lines, err = run(capsys, "--source", "weibo_pc", str(tmp_path / "pc.json"), "--param", "domain")
    assert code == 2 and lines == [] and "--param 'domain': expected KEY=VALUE" in err
    code, lines, err = run(capsys, "--source", "weibo_pc", str(tmp_path / "pc.json"), "--header", "no colon")
    assert code == 2 and lines == [] and "--header 'no colon': expected 'NAME: VALUE'" in err


def test_ecshop_kinds_are_sniffed(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = run(capsys, "--source", "ecshop", str(FIXTURES / "ecshop_category3_p1.html"))
    assert code == 0 and lines[-1]["task"] == "listing:ecshop:3" and lines[0] == {"product_id": "20"}
    code, lines, _ = run(capsys, "--source", "ecshop", str(FIXTURES / "ecshop_comment7_p3_gbk.json"))
    assert code == 0 and lines[-1]["items"] == 1 and lines[-1]["task"] == "reviews:ecshop:7"
    code, lines, _ = run(
        capsys, "--source", "ecshop", str(FIXTURES / "ecshop_goods7.html"), "--kind", "reviews", "--target", "7"
    )
    assert code == 0 and lines[-1]["items"] == 3 and lines[-1]["info"] == {"page": "1", "record_count": "7"}


def test_unknown_source_and_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, lines, err = run(capsys, "--source", "weibo", str(FIXTURES / "jd_page0.jsonp"))
    assert code == 2 and lines == [] and err.startswith("icecrawler parse: error: unknown source 'weibo'"), err
    code, lines, err = run(capsys, "--source", "jd", str(tmp_path / "nope.json"))
    assert code == 2 and lines == [] and "nope.json" in err
    # One line in the form every other command uses, without Python's "[Errno 2]".
    assert err.startswith("icecrawler parse: error: No such file or directory: ") and "Errno" not in err, err
    code, lines, err = run(capsys, "--source", "jd", str(FIXTURES / "jd_page0.jsonp"), "--now", "yesterday")
    assert code == 2 and lines == [] and err.startswith("icecrawler parse: error: --now 'yesterday': expected ISO 8601")


def test_weibo_web_pages_walls_and_longtext(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = run(
        capsys, "--source", "weibo_web", str(FIXTURES / "weibo_web_page1.json"), "--now", "2021-07-06T12:00"
    )
    *items, summary = lines
    assert code == 0 and len(items) == 5 and summary["task"] == "user:weibo_web:5612345678"
    assert "since_id=4700000000005000kp2" in str(summary["next"]) and summary["cursor"] == "4700000000009000"
    code, lines, _ = run(capsys, "--source", "weibo_web", str(FIXTURES / "weibo_web_longtext.json"))
    assert code == 0 and "完整的正文" in str(lines[-1]["info"])
    for name, outcome in (
        ("weibo_web_login.json", "LoginRequired"),
        ("weibo_web_login_page.html", "LoginRequired"),
        ("weibo_pc_busy_gbk.html", "Busy"),
    ):
        code, lines, _ = run(capsys, "--source", "weibo_web", str(FIXTURES / name))
        assert code == 0 and lines[-1]["outcome"] == outcome, name


def test_weibo_mobile_profile_answer_names_the_next_request(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    profile = tmp_path / "profile.json"
    profile.write_bytes(
        json.dumps(
            {
                "ok": 1,
                "data": {
                    "userInfo": {"id": 1907518591, "screen_name": "甲"},
                    "tabsInfo": {"tabs": [{"tab_type": "weibo", "containerid": "1076031907518591"}]},
                },
            }
        )
        .replace("/", "\\/")
        .encode()
    )
    code, lines, _ = run(capsys, "--source", "weibo_mobile", str(profile))
    assert code == 0 and lines[-1]["task"] == "user:weibo_mobile:1907518591"
    assert "containerid=1076031907518591" in str(lines[-1]["next"])


def test_jd_api_endpoint_comment_info_list_and_risk_header(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = run(
        capsys,
        "--source",
        "jd",
        "--set",
        "sources.jd.endpoint=api",
        str(FIXTURES / "jd_page0.jsonp"),
        "--now",
        "2024-12-03T00:00:00",
    )
    assert code == 0 and lines[-1]["items"] == 3 and "functionId=pc_club_productPageComments" in str(lines[-1]["next"])
    code, lines, _ = run(capsys, "--source", "jd", str(FIXTURES / "jd_lego_comments.json"))
    assert code == 0 and lines[-1]["items"] == 2
    code, lines, _ = run(
        capsys, "--source", "jd", str(FIXTURES / "jd_page0.jsonp"), "--header", 'x-rp-content: {"code":"605"}'
    )
    assert code == 0 and (lines[-1]["outcome"], lines[-1]["error_class"]) == ("Banned", "jd-risk-605")
    code, _, err = run(capsys, "--source", "jd", str(FIXTURES / "jd_page0.jsonp"), "--header", "no colon")
    assert code == 2 and "NAME: VALUE" in err
