#!/usr/bin/env bash
# make release: cut the release of galaxy.yml's version in one command (issue 42).
#   1. refuse what would make a wrong release: a version already released or tagged, changes to the release's own
#      files not committed, changelog fragments antsibull-changelog rejects;
#   2. the release summary (the tested matrix, scripts/release-notes.py) as a fragment, then
#      `antsibull-changelog release`: changelogs/changelog.yaml and CHANGELOG.rst get the release, the fragments go;
#   3. the tarball (ansible-galaxy collection build, into .cache/dist) and its sha256 (.cache/dist/<tarball>.sha256);
#   4. docs/releases/<version>.md: the tarball, its sha256 and the tested matrix (not in the tarball: build_ignore);
#   5. a commit of the release's files only and an annotated tag <version> (RELEASE_COMMIT=0: neither).
# RELEASE_DATE (default today, UTC) is the release's date; RELEASE_GIT_LOCK, when set, is a file every git command
# here holds (flock), for a checkout that several people commit to.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH"
git_() { if [[ -n "${RELEASE_GIT_LOCK:-}" ]]; then flock "$RELEASE_GIT_LOCK" git "$@"; else git "$@"; fi; }
VERSION="$("$PY" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')"
DATE="${RELEASE_DATE:-$(date -u +%F)}"
commit="${RELEASE_COMMIT:-1}"
die() { echo "release: $*" >&2; exit 1; }

[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "galaxy.yml's version '$VERSION' is not X.Y.Z"
if "$PY" -c 'import sys, yaml; sys.exit(0 if sys.argv[1] in (yaml.safe_load(open("changelogs/changelog.yaml"))["releases"] or {}) else 1)' "$VERSION"; then
  die "$VERSION is already in changelogs/changelog.yaml: raise galaxy.yml's version first"
fi
if [[ "$commit" == 1 ]]; then
  ! git_ rev-parse -q --verify "refs/tags/$VERSION" >/dev/null || die "the tag $VERSION exists"
  dirty="$(git_ status --porcelain -- galaxy.yml meta CHANGELOG.rst changelogs docs/releases)"
  [[ -z "$dirty" ]] || die "commit these first (the release commits only its own files): $dirty"
fi
antsibull-changelog lint || die "antsibull-changelog lint refused a fragment (above)"
"$PY" scripts/release-notes.py semver || die "a breaking change needs a major version (above)"

echo "release: $VERSION ($DATE)"
python scripts/release-notes.py summary >"changelogs/fragments/$VERSION.yml"
antsibull-changelog release --version "$VERSION" --date "$DATE"

mkdir -p .cache/dist
tarball=".cache/dist/gpuserve-sglang-$VERSION.tar.gz"
ansible-galaxy collection build --force --output-path .cache/dist . >/dev/null
[[ -f "$tarball" ]] || die "ansible-galaxy built no $tarball"
sha="$(sha256sum "$tarball" | cut -d' ' -f1)"
echo "$sha  $(basename "$tarball")" >"$tarball.sha256"
mkdir -p docs/releases
python scripts/release-notes.py notes "$(basename "$tarball")" "$sha" "$DATE" >"docs/releases/$VERSION.md"

if [[ "$commit" == 1 ]]; then
  # changelogs/: changelog.yaml, the fragments antsibull-changelog removed, its .plugin-cache.yaml (the plugins it
  # compares the next release with; it was clean before, so nothing else is there)
  git_ add -A CHANGELOG.rst changelogs "docs/releases/$VERSION.md"
  git_ commit -q -m "release $VERSION" -- CHANGELOG.rst changelogs "docs/releases/$VERSION.md"
  git_ tag -a "$VERSION" -m "gpuserve.sglang $VERSION, sha256 $sha of $(basename "$tarball")"
  echo "release: committed and tagged $VERSION ($(git_ rev-parse --short HEAD))"
fi
echo "release: $tarball"
echo "release: sha256 $sha"
echo "release: notes docs/releases/$VERSION.md, changelog CHANGELOG.rst"
