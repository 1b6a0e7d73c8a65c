# Writes OUT, a C file holding every Lua source of FILES (a ;-list) as a
# byte array, so the binary carries the Lua half of the wq module and needs
# no path of the build machine. Run by CMake at build time:
#   cmake -DOUT=... -DFILES=a.lua;b.lua -P scripts/embed-lua.cmake
include(${CMAKE_CURRENT_LIST_DIR}/embed-common.cmake)
set(body "/* Generated from the lua/ folder by scripts/embed-lua.cmake: do not edit. */\n")
string(APPEND body "#include \"lua/embedded.h\"\n\n")
set(table "")
set(i 0)
foreach(f ${FILES})
  get_filename_component(name ${f} NAME_WE)
  wq_c_bytes(${f} hex)
  string(APPEND body "static const unsigned char src${i}[] = {\n${hex}};\n")
  string(APPEND table "    {\"${name}\", (const char *)src${i}, sizeof src${i}},\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "\nconst wq_embedded wq_embedded_lua[] = {\n${table}    {0, 0, 0}};\n")
wq_write_if_changed(${OUT} "${body}")
