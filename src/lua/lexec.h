/*
 * wq.exec: run a program without a shell, waiting in the calling task.
 */
#ifndef WQ_LEXEC_H
#define WQ_LEXEC_H

#include <lua.h>

/* Registers the child record type and wq.exec in the table at the top of L. */
void wq_lua_open_exec(lua_State *L);
/*
 * The argv table at idx as the NULL-terminated array posix_spawn takes
 * (numbers converted), for function fn's messages; raises on a bad one.
 * Pushes the table anchoring its strings and the array (a userdata): they
 * live while those two stay on the stack.
 */
char **wq_lua_check_argv(lua_State *L, int idx, const char *fn);
/*
 * Our environment plus the opts.env table at idx (a value of false removes
 * a name) as a NULL-terminated array; raises on a bad name or value. Pushes
 * the table anchoring the strings and the array, as wq_lua_check_argv.
 */
char **wq_lua_build_env(lua_State *L, int idx, const char *fn);

#endif
