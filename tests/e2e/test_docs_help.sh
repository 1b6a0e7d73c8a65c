#!/usr/bin/env bash
# The docs cannot drift from the binary (issue 31): every command, option and
# WQRUN_* variable `wqrun --help` lists is in docs/lua-api.md's command list
# and options table, and every command and option in the man page. A command
# or option added to --help alone fails here.
. "$(dirname "$0")/lib.sh"

run --help
expect_rc 0 "--help"
HELP=$OUT
API=$WQ_SOURCE_DIR/docs/lua-api.md
# the man page's source, with roff's \- as -
MAN=$(sed 's/\\-/-/g' "$WQ_SOURCE_DIR/man/wqrun.1.in")

# commands: the words after "wqrun" in the usage lines (pause|resume is two)
commands=$(printf '%s\n' "$HELP" | sed -n 's/^ *\(usage: \)\{0,1\}wqrun \([a-z][a-z|-]*\).*/\2/p' |
    tr '|' '\n' | sort -u)
check "--help lists the commands (found: $(echo $commands))" test "$(printf '%s\n' "$commands" | wc -l)" -ge 17
# the command list of lua-api.md: its ``` block under "## Command line"
block=$(awk '/^## Command line/ { on = 1 } on && /^```/ { n++; next } on && n == 1 { print } n == 2 { exit }' "$API")
for c in $commands; do
    check "docs/lua-api.md's command list has '$c'" \
        grep -qE "^wqrun ([a-z-]+\|)*$c( |\||$)" <<<"$block"
    check "the man page has the command '$c'" grep -qE "(^|[ |])$c([ |,]|$)" <<<"$MAN"
done

# options: the lines of --help's options section
options=$(printf '%s\n' "$HELP" | sed -n 's/^  \(--[a-z-]*\).*/\1/p' | sort -u)
check "--help lists the options (found: $(echo $options))" test "$(printf '%s\n' "$options" | wc -l)" -ge 14
for o in $options; do
    check "docs/lua-api.md's options table has $o" grep -q "^| \`$o[ \`]" "$API"
    check "the man page has the option $o" grep -qE "^\.BI? $o( |\$)" <<<"$MAN"
done

# the environment: every WQRUN_ variable --help names
vars=$(printf '%s\n' "$HELP" | grep -o 'WQRUN_[A-Z_]*[A-Z]' | sort -u)
check "--help names the variables" test "$(printf '%s\n' "$vars" | wc -l)" -ge 14
for v in $vars; do
    check "docs/lua-api.md names $v" grep -q "\`$v\`" "$API"
done

finish
