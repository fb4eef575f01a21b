"""The allow-list (``mtrl/sandbox/filesystem.py``): what the interpreter needs, nothing else (issue 23 §1).

The tiers apply it for real in test_hostile_corpus.py and test_sandbox_tiers.py; these check its shape: no
``/usr`` or library directory as a whole, no ``site-packages`` (even one made later), the symlinks the loader
resolves, a skeleton that makes parents first, and a layout probe that itself holds no capability.
"""

from __future__ import annotations

import os

from mtrl.sandbox.filesystem import (
    elf_interpreter,
    filesystem_view,
    inside,
    interpreter,
    interpreter_layout,
    symlinks_on_the_way,
)


def test_only_the_standard_library_and_the_files_the_interpreter_maps_are_readable() -> None:
    view = filesystem_view()
    stdlib = interpreter_layout(interpreter()).stdlib
    assert stdlib in view.directories
    assert all(path != stdlib for path, _ in view.readable)  # granted entry by entry, site-packages left out
    for broad in ("/usr", "/usr/lib", "/usr/local", "/usr/local/share", "/usr/share", "/lib", "/etc", "/tmp"):
        assert all(path != broad for path, _ in view.readable), broad
    library_dirs = {os.path.dirname(path) for path in view.files if ".so" in path}
    assert not any(path in library_dirs for path, _ in view.readable)  # single files, never their directory
    assert interpreter() in view.files
    assert any("/libc.so" in path for path in view.files)
    for name in ("site-packages", "dist-packages"):
        hidden = os.path.join(stdlib, name)
        assert hidden in view.hide  # whether it exists or not
        assert not any(inside(path, hidden) for path, _ in view.readable)


def test_the_loader_finds_its_way_in_the_new_root() -> None:
    view = filesystem_view()
    loader = elf_interpreter(interpreter())
    assert loader.startswith("/")
    links = dict(view.links)
    resolved = os.path.realpath(loader)
    assert resolved in view.files
    for link in symlinks_on_the_way(loader):
        assert links.get(link) == os.readlink(link)
    made = set()
    for path in view.skeleton:  # parents first, nothing twice, never /tmp (the run's own tmpfs)
        assert os.path.dirname(path) in made | {"/", "/tmp"}, path
        assert path not in made
        made.add(path)
    assert "/tmp" not in made
    for path in [*view.directories, *view.files, *links]:
        assert os.path.dirname(path) in made | {"/"}, path


def test_the_layout_probe_holds_no_capability() -> None:
    capabilities = dict(interpreter_layout(interpreter()).capabilities)
    assert {name: capabilities[name] for name in ("CapEff", "CapPrm", "CapInh", "CapAmb")} == dict.fromkeys(
        ("CapEff", "CapPrm", "CapInh", "CapAmb"), 0
    )
    if os.geteuid() == 0:  # root here holds CAP_SETPCAP, so the bounding set is emptied too
        assert capabilities["CapBnd"] == 0
