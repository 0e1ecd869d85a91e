#!/bin/sh
# A boxed worker in POSIX shell (docs/boxed.md), one request at a time.
# The runtime writes each record compactly, keys in a fixed order, so a line
# can be taken apart with the shell's own pattern matching: no JSON parser.
# Handlers: add(a, b) of integers, greet(name), fail(message).

reply() { printf '{"type":"reply","id":"%s",%s}\n' "$1" "$2"; }

printf '%s\n' '{"type":"hello","protocol":1,"handlers":["add","greet","fail"],"concurrency":1}'
while IFS= read -r line; do
    rest=${line#'{"type":"'}
    type=${rest%%'"'*}
    case $type in
    heartbeat) printf '%s\n' '{"type":"heartbeat"}' ;;
    shutdown) exit 0 ;;
    request)
        rest=${line#*'"id":"'}
        id=${rest%%'"'*}
        rest=${line#*'"handler":"'}
        handler=${rest%%'"'*}
        rest=${line#*'"args":['}
        args=${rest%%'],"kwargs"'*}
        case $handler in
        add) reply "$id" "\"value\":$((${args%%,*} + ${args#*,}))" ;;
        greet) reply "$id" "\"value\":\"hello, ${args#'"'}" ;;
        fail) reply "$id" "\"error\":{\"type\":\"ShellError\",\"message\":$args}" ;;
        *) reply "$id" "\"error\":{\"type\":\"UnknownHandler\",\"message\":\"$handler\"}" ;;
        esac
        ;;
    esac
done
