"""docs/CONFIGURATION.md is generated from the settings (portal/reference.py) and up to date."""

from __future__ import annotations

import re

from portal import reference

READ = re.compile(r"\b(?:env_(?:str|bool|int|list|choice)|_required)\(\s*\"([A-Z0-9_]+)\"")


def test_the_committed_reference_is_up_to_date():
    """Adding or changing a variable means running ``python -m portal.reference``."""
    assert reference.OUTPUT.read_text() == reference.render(reference.collect())


def test_every_variable_the_settings_read_is_listed_with_an_effect():
    listed = {v.name: v for v in reference.collect()}
    read = {name for path in (reference.SETTINGS, *reference.HELPERS)
            for name in READ.findall(path.read_text())}
    assert len(read) > 100
    assert read - set(listed) == set()
    silent = [name for name, var in listed.items() if not var.effect.strip()]
    assert not silent, f"add a comment above these in portal/settings.py (or a NOTE): {silent}"


def test_code_that_reads_the_environment_itself_is_listed_too():
    names = {v.name for v in reference.collect() if v.section == "Read outside the settings"}
    assert {"PROMETHEUS_MULTIPROC_DIR", "BEACON_NO_FORK"} <= names


def test_the_effect_is_the_comment_heading_the_paragraph(tmp_path):
    path = tmp_path / "settings.py"
    path.write_text(
        "# --- Mail ----\n"
        "\n"
        "# Where mail goes.\n"
        "HOST = env_str('HOST')\n"
        "PORT = env_int('PORT', 25)  # the port\n"
        "\n"
        "LONE = env_str('LONE')\n")
    src = reference._Source(path)
    assert src.section_at(4) == (1, "Mail")
    assert src.comment_above(4, paragraph=True) == "Where mail goes."
    assert src.comment_above(5, paragraph=True) == "Where mail goes."
    assert src.comment_above(5, paragraph=False) == ""
    assert src.comment_above(7, paragraph=True) == ""


def test_the_check_mode_fails_on_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "CONFIGURATION.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(reference, "OUTPUT", stale)
    assert reference.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert reference.main([]) == 0
    assert reference.main(["--check"]) == 0
