#!/usr/bin/env bash
# `cmake --install` gives a wqrun that works anywhere: the Lua half of the
# wq module is inside the binary, and nothing of the build machine is (no
# source path on package.path, none in the file at all). It also installs
# the man page (rendered without warnings, naming every option of --help),
# the docs, the examples and the systemd unit.
. "$(dirname "$0")/lib.sh"

BUILD=$(dirname "$WQRUN")
PREFIX=$TMP/prefix
if cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1; then
    pass
else
    fail "cmake --install failed: $(cat "$TMP/install.log")"
fi
BIN=$PREFIX/bin/wqrun
[ -x "$BIN" ] && pass || fail "no $BIN"

mkdir -p "$TMP/elsewhere"
cat >"$TMP/elsewhere/job.lua" <<'LUA'
local seen = {}
local q = wq.queue("q", {handler = function(key, payload) seen[#seen + 1] = key .. "=" .. payload.n end})
q:add("a", {n = (1 << 53) + 1})
wq.sleep(0.01)
print(seen[1], wq.json.encode({x = 0.1}), type(q.dead))
print(pcall(require, "wqtest"))
LUA
# Run from another directory, with no LUA_PATH pointing into the source tree.
out=$(cd "$TMP/elsewhere" && env -u LUA_PATH "$BIN" --quiet job.lua 2>&1)
rc=$?
[ $rc -eq 0 ] && pass || fail "installed wqrun exited $rc: $out"
case $out in
*"a=9007199254740993	{\"x\":0.1}	function"*) pass ;;
*) fail "unexpected output: $out" ;;
esac
case $out in
*"false	module 'wqtest' not found"*) pass ;;
*) fail "the test helper is reachable from an installed wqrun: $out" ;;
esac
# A sanitizer build keeps source file names for its reports (ASan's
# descriptions of globals): the path check is for the normal build.
if grep -a -q -F "__asan_init" "$BIN"; then
    echo "test_install: sanitizer build, source paths expected in its reports"
elif grep -a -q -F "$WQ_SOURCE_DIR" "$BIN"; then
    fail "the binary contains the source path $WQ_SOURCE_DIR"
else
    pass
fi

# The man page: renders cleanly and documents every option --help lists.
MAN=$PREFIX/share/man/man1/wqrun.1
if [ -f "$MAN" ]; then
    pass
    command -v nroff >/dev/null || fail "needs nroff (groff-base) to render the man page"
    warnings=$(nroff -man -ww "$MAN" 2>&1 >/dev/null)
    [ -z "$warnings" ] && pass || fail "the man page renders with warnings: $warnings"
    page=$(nroff -man "$MAN" 2>/dev/null | sed 's/.\x08//g')
    case $page in *"wqrun $("$BIN" --version | awk '{ print $2 }')"*) pass ;; *) fail "the man page does not name the version" ;; esac
    missing=
    for opt in $("$BIN" --help | grep -oE '^  --[a-z-]+' | sort -u); do
        case $page in *"$opt"*) ;; *) missing="$missing $opt" ;; esac
    done
    [ -z "$missing" ] && pass || fail "the man page does not document:$missing"
else
    fail "no man page at $MAN"
fi
for f in share/doc/wqrun/README.md share/doc/wqrun/lua-api.md share/doc/wqrun/deploy.md \
    share/doc/wqrun/semantics.md share/doc/wqrun/examples/webhooks.lua \
    share/doc/wqrun/examples/crawler.lua lib/systemd/system/wqrun.service; do
    [ -f "$PREFIX/$f" ] && pass || fail "not installed: $f"
done
grep -q '^Type=notify$' "$PREFIX/lib/systemd/system/wqrun.service" && pass || fail "the unit is not Type=notify"

finish
