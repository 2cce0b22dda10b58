"""MkDocs hook: serve Mermaid and KaTeX from the built site, never from a CDN.

Both come from npm (``package.json``, pinned, with its lock file); ``npm ci`` puts them in
``node_modules/``, and this hook adds the files a page needs to the site under
``assets/vendor/`` as generated files (nothing is written into ``docs/``).
``overrides/main.html`` loads them on the pages that have a diagram or a formula;
Mermaid is loaded before Material's bundle, which otherwise fetches it from unpkg.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

SITE_DIR = "assets/vendor"


@dataclass(frozen=True)
class Asset:
    package: str
    source: str  # path inside node_modules/<package>/, a file or a folder
    target: str  # path under assets/vendor/


ASSETS = (
    Asset("mermaid", "dist/mermaid.min.js", "mermaid/mermaid.min.js"),
    Asset("mermaid", "LICENSE", "mermaid/LICENSE"),
    Asset("katex", "dist/katex.min.js", "katex/katex.min.js"),
    Asset("katex", "dist/katex.min.css", "katex/katex.min.css"),
    Asset("katex", "dist/contrib/auto-render.min.js", "katex/contrib/auto-render.min.js"),
    Asset("katex", "dist/fonts", "katex/fonts"),  # katex.min.css asks for fonts/… beside itself
    Asset("katex", "LICENSE", "katex/LICENSE"),
)


def check(root: Path) -> Path:
    """``node_modules`` of ``root`` with the pinned versions of package.json, or one clear error."""
    modules = root / "node_modules"
    wanted = json.loads((root / "package.json").read_text(encoding="utf-8"))["dependencies"]
    hint = f"run `npm ci` in {root} (it installs the pinned Mermaid and KaTeX the site serves)"
    for package, version in wanted.items():
        manifest = modules / package / "package.json"
        if not manifest.is_file():
            raise PluginError(f"vendor: {manifest.parent} is missing: {hint}")
        found = json.loads(manifest.read_text(encoding="utf-8")).get("version")
        if found != version:
            raise PluginError(f"vendor: node_modules has {package} {found}, package.json pins {version}: {hint}")
    for asset in ASSETS:
        if not (modules / asset.package / asset.source).exists():
            raise PluginError(f"vendor: {modules / asset.package / asset.source} is missing: {hint}")
    return modules


def site_files(modules: Path) -> list[tuple[str, Path]]:
    """(site path, file on disk) of every vendored file."""
    out = []
    for asset in ASSETS:
        source = modules / asset.package / asset.source
        paths = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for path in paths:
            rel = path.relative_to(source).as_posix() if source.is_dir() else ""
            out.append((f"{SITE_DIR}/{asset.target}" + (f"/{rel}" if rel else ""), path))
    return out


_modules: Path | None = None


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _modules
    _modules = check(Path(config.config_file_path).resolve().parent)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    assert _modules is not None
    for uri, path in site_files(_modules):
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
