# Writes OUT, a C file holding every Lua source of FILES (a ;-list) as a
# byte array, so the binary carries the Lua half of the wq module and needs
# no path of the build machine. Run by CMake at build time:
#   cmake -DOUT=... -DFILES=a.lua;b.lua -P scripts/embed-lua.cmake
set(body "/* Generated from the lua/ folder by scripts/embed-lua.cmake: do not edit. */\n")
string(APPEND body "#include \"lua/embedded.h\"\n\n")
set(table "")
set(i 0)
foreach(f ${FILES})
  get_filename_component(name ${f} NAME_WE)
  file(READ ${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" hex "${hex}")
  string(APPEND body "static const unsigned char src${i}[] = {\n${hex}};\n")
  string(APPEND table "    {\"${name}\", (const char *)src${i}, sizeof src${i}},\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "\nconst wq_embedded wq_embedded_lua[] = {\n${table}    {0, 0, 0}};\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
