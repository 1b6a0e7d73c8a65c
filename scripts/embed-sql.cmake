# Writes OUT, a C file holding the PostgreSQL schema's SQL (src/store/pg/sql/)
# as NUL-terminated byte arrays: MIGRATIONS (a ;-list of migrations/vN.sql,
# taken in N's order) and FUNCTIONS (a ;-list of functions/*.sql, taken in
# name order), so the binary carries them and needs no path of the build
# machine. Run by CMake at build time:
#   cmake -DOUT=... -DMIGRATIONS=a;b -DFUNCTIONS=c;d -P scripts/embed-sql.cmake
include(${CMAKE_CURRENT_LIST_DIR}/embed-common.cmake)
set(body "/* Generated from src/store/pg/sql/ by scripts/embed-sql.cmake: do not edit. */\n")
string(APPEND body "#include \"store/pg/pg_sql.h\"\n\n")
set(i 0)
foreach(kind MIGRATIONS FUNCTIONS)
  set(files ${${kind}})
  list(SORT files COMPARE NATURAL)
  set(table_${kind} "")
  foreach(f ${files})
    get_filename_component(name ${f} NAME_WE)
    wq_c_bytes(${f} hex)
    string(APPEND body "static const char sql${i}[] = {\n${hex}0x00};\n")
    string(APPEND table_${kind} "    {\"${name}\", sql${i}, sizeof sql${i} - 1},\n")
    math(EXPR i "${i} + 1")
  endforeach()
endforeach()
string(APPEND body "\nconst wq_pg_sqlfile wq_pg_migrations[] = {\n${table_MIGRATIONS}    {0, 0, 0}};\n")
string(APPEND body "\nconst wq_pg_sqlfile wq_pg_functions[] = {\n${table_FUNCTIONS}    {0, 0, 0}};\n")
wq_write_if_changed(${OUT} "${body}")
