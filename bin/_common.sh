# Shared by bin/test and bin/run (sourced, not executed): repo root, venv, redis-server.
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

# Hash of everything that decides what the venv holds; a change means reinstall. The list
# of top-level packages counts too: the editable install maps only those it saw.
tf_requirements_hash() {
  {
    cat requirements.txt requirements-test.txt setup.cfg pyproject.toml
    ls -d -- */__init__.py 2>/dev/null
  } | sha256sum | cut -d' ' -f1
}

# Create .venv if needed and install the test requirements and the project (editable) into
# it, unless the stamp shows the same requirements were installed already. bin/run uses the
# same venv: one environment, one stamp, no second install to drift.
tf_ensure_venv() {
  local py=${PYTHON:-python3} stamp=.venv/.test-stamp want
  if [ ! -x .venv/bin/python ] || ! tf_python_ok .venv/bin/python; then
    command -v "$py" >/dev/null || tf_die "$py not found: install Python 3.11 or newer"
    tf_python_ok "$py" ||
      tf_die "TaskForge needs Python 3.11+, but $py is $("$py" -V 2>&1); set PYTHON=/path/to/python3.11"
    rm -rf .venv
    "$py" -m venv .venv ||
      tf_die "'$py -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"
  fi
  want=$(tf_requirements_hash)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "Installing Python dependencies into .venv ..." >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check \
      -r requirements-test.txt -e . || tf_die "pip install failed (see above)"
    echo "$want" >"$stamp"
  fi
  export PATH="$PWD/.venv/bin:$PATH"
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
# (package systemd) for tests/deploy, faketime for tests/faults (a skewed host clock).
# Installed with apt when we can; otherwise say so and go on: those tests skip on a laptop
# and fail under CI (tests/_tools.py require_tool).
tf_ensure_tools() {
  local pair tool package missing=()
  for pair in systemd-analyze:systemd faketime:faketime; do
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
