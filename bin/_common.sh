# Shared by bin/test and bin/run (sourced, not executed): repo root, venv, lint files,
# redis-server.
# shellcheck shell=bash

tf_die() {
  echo "bin/${0##*/}: $*" >&2
  exit 1
}

tf_cd_root() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || tf_die "cannot enter the repository root"
}

# Succeed when the given interpreter is Python 3.11 or newer.
tf_python_ok() {
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

# Hash of the files that decide what a level of the venv holds ("run" or "test"); a change
# means reinstall.
tf_requirements_hash() {
  local files=(requirements.txt pyproject.toml)
  [ "$1" = run ] || files+=(requirements-test.txt requirements-tracing.txt)
  cat "${files[@]}" | sha256sum | cut -d' ' -f1
}

# The server (shared, gateway, workerd) is no distribution: it runs from this checkout. A .pth
# in the venv's site-packages puts the checkout on sys.path, so `python -m workerd`, gunicorn
# and a handler module installed into the venv (`from workerd import handler`) find it from any
# directory. The client is installed editable beside it, for the `taskforge` command.
tf_link_checkout() {
  local version
  version=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
    tf_die ".venv/bin/python does not run"
  mkdir -p ".venv/lib/python$version/site-packages"
  printf '%s\n' "$PWD" >".venv/lib/python$version/site-packages/taskforge-checkout.pth"
}

# Create .venv if needed and install a level into it: "run" (bin/run) is requirements.txt and
# the client (editable), with the checkout on the venv's path (tf_link_checkout); "test"
# (bin/test) adds requirements-test.txt. One venv, one stamp per level: the test level holds the run level, so after bin/test, bin/run installs nothing; after
# bin/run, bin/test installs the test tools once.
tf_ensure_venv() {
  local level=$1 py=${PYTHON:-python3} want requirements
  if [ ! -x .venv/bin/python ] || ! tf_python_ok .venv/bin/python; then
    command -v "$py" >/dev/null || tf_die "$py not found: install Python 3.11 or newer"
    tf_python_ok "$py" ||
      tf_die "TaskForge needs Python 3.11+, but $py is $("$py" -V 2>&1); set PYTHON=/path/to/python3.11"
    rm -rf .venv
    "$py" -m venv .venv ||
      tf_die "'$py -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"
  fi
  export PATH="$PWD/.venv/bin:$PATH"
  tf_link_checkout
  want=$(tf_requirements_hash "$level")
  [ "$(cat ".venv/.$level-stamp" 2>/dev/null)" != "$want" ] || return 0
  if [ "$level" = run ] &&
    [ "$(cat .venv/.test-stamp 2>/dev/null)" = "$(tf_requirements_hash test)" ]; then
    echo "$want" >.venv/.run-stamp
    return 0
  fi
  requirements=requirements.txt
  [ "$level" = run ] || requirements=requirements-test.txt
  echo "Installing Python dependencies ($requirements) into .venv ..." >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements" -e . ||
    tf_die "pip install failed (see above)"
  echo "$want" >".venv/.$level-stamp"
  # requirements-test.txt includes requirements.txt: the run level is now installed too.
  [ "$level" = run ] || tf_requirements_hash run >.venv/.run-stamp
}

# Print, NUL-separated, the Python files ruff should see: those git tracks when this is a git
# checkout (a user's untracked myapp/ is theirs to lint), else every one under the root (an
# export made with git archive or from a tarball has no .git).
tf_lint_files() {
  local top file
  top=$(git rev-parse --show-toplevel 2>/dev/null) || top=""
  if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
    # A tracked file deleted in the work tree but not yet in the index: nothing to lint.
    git ls-files -z -- '*.py' '*.pyi' | while IFS= read -r -d '' file; do
      [ ! -f "$file" ] || printf '%s\0' "$file"
    done
  else
    printf '.\0'
  fi
}

# Make sure redis-server and redis-cli are on PATH, installing them with apt when we can.
tf_ensure_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing redis-server with apt-get ..." >&2
    # redis-server brings redis-tools (redis-cli) along.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null ||
      tf_die "apt-get install redis-server failed (see above)"
    command -v redis-server >/dev/null || tf_die "redis-server still not on PATH after apt-get"
    return 0
  fi
  tf_die "redis-server (Redis 7+) is not on PATH: install it (Debian/Ubuntu: sudo apt-get install redis-server) and retry"
}

# Make sure the tools that tests call (not Python packages) are on PATH: systemd-analyze
# (package systemd) for tests/deploy, faketime for tests/faults (a skewed host clock), a C
# compiler (package build-essential: gcc and libc's headers) for the shim that moves Redis's
# clock (tests/faults/clock_shift.c), chromium and its chromedriver (package chromium-driver)
# for tests/browser: the system's browser, so Selenium never downloads one.
# Installed with apt when we can; otherwise say so and go on: those tests skip on a laptop
# and fail under CI (tests/support/tools.py require_tool).
tf_ensure_tools() {
  local pair tool package missing=()
  for pair in systemd-analyze:systemd faketime:faketime gcc:build-essential valgrind:valgrind \
    chromium:chromium chromedriver:chromium-driver; do
    tool=${pair%%:*} package=${pair#*:}
    command -v "$tool" >/dev/null || missing+=("$package")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing ${missing[*]} with apt-get ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null ||
      tf_die "apt-get install ${missing[*]} failed (see above)"
    return 0
  fi
  echo "bin/${0##*/}: missing ${missing[*]} (Debian/Ubuntu: sudo apt-get install ${missing[*]});" \
    "the tests that need them skip, or fail under CI" >&2
}
