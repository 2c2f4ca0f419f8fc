"""Linker-named archive members: finding their bytes, and writing them out and back safely."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cached_dist.errors import InputError
from cached_dist.jobfile.members import named_member, read_markers, split_name
from cached_dist.link.extracted import Extraction, sweep


def ar(path: Path, members: list[tuple[str, bytes]], flavour: str = "gnu") -> dict[str, int]:
    """Writes an ar archive (GNU names with a // table for long ones, or BSD #1/N names);
    returns each member's header offset."""
    out = bytearray(b"!<arch>\n")
    long_names = b"".join(n.encode() + b"/\n" for n, _ in members if len(n) > 15)
    if flavour == "gnu":
        out += b"/".ljust(16) + b"0".ljust(32) + b"4".ljust(10) + b"`\n"
        out += b"\0\0\0\0"  # an empty symbol table
        if long_names:
            out += b"//".ljust(16) + b"".ljust(32) + str(len(long_names)).encode().ljust(10)
            out += b"`\n" + long_names + (b"\n" if len(long_names) % 2 else b"")
    offsets, table_at = {}, 0
    for name, data in members:
        offsets[name] = len(out)
        if flavour == "bsd":
            field, body = f"#1/{len(name)}".encode(), name.encode() + data
        elif len(name) > 15:
            field, body = f"/{table_at}".encode(), data
            table_at += len(name) + 2
        else:
            field, body = name.encode() + b"/", data
        out += field.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6)
        out += b"644".ljust(8) + str(len(body)).encode().ljust(10) + b"`\n" + body
        if len(body) % 2:
            out += b"\n"
    path.write_bytes(bytes(out))
    return offsets


@pytest.mark.parametrize("flavour", ["gnu", "bsd"])
def test_members_are_found_by_name_and_offset(tmp_path: Path, flavour: str) -> None:
    archive = tmp_path / "lib(x).a"  # parentheses in the archive's own name too
    long = "a_rather_long_member_name.o"
    offsets = ar(archive, [("b.o", b"BBB"), (long, b"LONG!"), ("b.o", b"second b")], flavour)
    first = named_member(f"{archive}(b.o at {offsets['b.o']})")
    assert first is not None and first.read() == b"second b"  # the dict kept the last b.o
    m = named_member(f"{archive}({long} at {offsets[long]})")
    assert m is not None and m.read() == b"LONG!" and m.archive == str(archive)


def test_two_members_with_the_same_name_are_told_apart_by_offset(tmp_path: Path) -> None:
    archive = tmp_path / "libd.a"
    ar(archive, [("d.o", b"one"), ("d.o", b"two")])
    data = archive.read_bytes()
    offsets = [i for i in range(len(data)) if data.startswith(b"d.o/ ", i)]
    assert [named_member(f"{archive}(d.o at {o})").read() for o in offsets] == [b"one", b"two"]  # type: ignore[union-attr]


def test_wrong_offset_or_name_is_an_error_naming_archive_member_offset(tmp_path: Path) -> None:
    archive = tmp_path / "libb.a"
    offsets = ar(archive, [("b.o", b"B"), ("c.o", b"C")])
    with pytest.raises(InputError, match=rf"archive member not found: b\.o at offset "
                       rf"{offsets['c.o']} in archive {archive} \(the member there is c\.o"):  # fmt: skip
        named_member(f"{archive}(b.o at {offsets['c.o']})")
    with pytest.raises(InputError, match=r"at offset 9 in archive .*\(no member header there"):
        named_member(f"{archive}(b.o at 9)")


def test_ordinary_names_are_not_members(tmp_path: Path) -> None:
    assert split_name("t1.o") == [] and split_name("libx.a(t2.o at 78).2.EAB.o") == []
    assert named_member(str(tmp_path / "none.a(x.o at 8)")) is None  # no archive: not found
    plain = tmp_path / "libp.a(p.o at 8)"
    plain.write_bytes(b"a file of that name")
    ar(tmp_path / "libp.a", [("p.o", b"member")])
    assert named_member(str(plain)) is None  # an ordinary file is used as it is


def test_extraction_writes_members_and_removes_them(tmp_path: Path) -> None:
    archive = tmp_path / "libb.a"
    offsets = ar(archive, [("b.o", b"B" * 10), ("c.o", b"C")])
    paths = [f"{archive}({n} at {o})" for n, o in offsets.items()]
    members = [named_member(p) for p in paths]
    with Extraction([m for m in members if m is not None]):
        assert [Path(p).read_bytes() for p in paths] == [b"B" * 10, b"C"]
        assert len(read_markers(str(tmp_path), fresh=True)) == 1
    assert sorted(os.listdir(tmp_path)) == ["libb.a"]


def test_extraction_never_overwrites_a_file_with_other_bytes(tmp_path: Path) -> None:
    archive = tmp_path / "libb.a"
    offsets = ar(archive, [("b.o", b"member")])
    path = f"{archive}(b.o at {offsets['b.o']})"
    member = named_member(path)
    assert member is not None
    Path(path).write_bytes(b"someone else's")  # appeared after the job file was read
    with pytest.raises(InputError, match=r"exists and is not the member b\.o at offset"),\
            Extraction([member]):  # fmt: skip
        pass
    assert Path(path).read_bytes() == b"someone else's"
    assert sorted(os.listdir(tmp_path)) == ["libb.a", Path(path).name]  # no marker left


def test_a_live_links_member_is_shared_and_a_dead_links_is_swept(tmp_path: Path) -> None:
    archive = tmp_path / "libb.a"
    offsets = ar(archive, [("b.o", b"member")])
    path = f"{archive}(b.o at {offsets['b.o']})"
    # Another process extracts the member and holds it until told to stop.
    holder = subprocess.Popen(
        [sys.executable, "-c", f"""
import sys
from cached_dist.jobfile.members import named_member
from cached_dist.link.extracted import Extraction
with Extraction([named_member({path!r})]):
    print("ready", flush=True)
    sys.stdin.readline()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "ready\n"
    member = named_member(path)  # exists and is managed: still read from the archive
    assert member is not None
    with Extraction([member]):
        assert Path(path).read_bytes() == b"member"
    assert Path(path).exists()  # the other link still needs it
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(30)
    assert not Path(path).exists()
    # A marker whose process is gone: its files go at the next sweep.
    Path(path).write_bytes(b"member")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    host = os.uname().nodename
    marker = {"start": "", "paths": [Path(path).name]}
    (tmp_path / f".cached-dist-members.{host}.{dead}.json").write_text(json.dumps(marker))
    sweep({str(tmp_path)})
    assert sorted(os.listdir(tmp_path)) == ["libb.a"]
