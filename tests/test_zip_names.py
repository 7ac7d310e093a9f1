"""Names in an LMS download read as their writer meant them (issue #44, item 6): UTF-8 names
without the zip's UTF-8 flag (as Moodle writes them) are not turned into CP437 mojibake, every
name is NFC, and a name that really is CP437 keeps its CP437 reading."""

import unicodedata
import zipfile

import pytest

from mlbook.lms.zipread import SafeZip, entry_name

NAME = "Noël Émile_701_assignsubmission_file_/lab01.ipynb"


def _zip_with_raw_name(path, raw: bytes, flag_utf8: bool) -> None:
    """A one-entry zip whose stored name is exactly ``raw``, with or without the UTF-8 flag."""
    placeholder = "x" * len(raw)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo(placeholder), b"{}")
    data = path.read_bytes()
    assert data.count(placeholder.encode()) == 2  # the local header and the central directory
    data = data.replace(placeholder.encode(), raw)
    if flag_utf8:  # general purpose flag bit 11, in both headers
        data = data.replace(b"PK\x03\x04\x14\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x08", 1)
        data = data.replace(b"PK\x01\x02\x14\x03\x14\x00\x00\x00", b"PK\x01\x02\x14\x03\x14\x00\x00\x08", 1)
    path.write_bytes(data)


@pytest.mark.parametrize("flag_utf8", [False, True])
def test_utf8_names_read_the_same_with_or_without_the_flag(tmp_path, flag_utf8):
    path = tmp_path / "download.zip"
    _zip_with_raw_name(path, NAME.encode("utf-8"), flag_utf8)
    assert bool(zipfile.ZipFile(path).infolist()[0].flag_bits & 0x800) == flag_utf8
    (member,) = SafeZip(path, max_file=1 << 20).members
    assert member.name == NAME and member.parts == ("Noël Émile_701_assignsubmission_file_", "lab01.ipynb")


def test_names_typed_on_macos_compare_equal_to_the_roster(tmp_path):
    path = tmp_path / "download.zip"
    _zip_with_raw_name(path, unicodedata.normalize("NFD", NAME).encode("utf-8"), flag_utf8=True)
    (member,) = SafeZip(path, max_file=1 << 20).members
    assert member.name == unicodedata.normalize("NFC", NAME)


def test_a_real_cp437_name_keeps_its_cp437_reading(tmp_path):
    path = tmp_path / "download.zip"
    raw = "Noël_701_/lab01.ipynb".encode("cp437")  # ë is 0x89 in CP437: not valid UTF-8 here
    _zip_with_raw_name(path, raw, flag_utf8=False)
    info = zipfile.ZipFile(path).infolist()[0]
    assert entry_name(info) == "Noël_701_/lab01.ipynb"
