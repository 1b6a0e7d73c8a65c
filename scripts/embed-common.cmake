# What scripts/embed-*.cmake share (CMake script mode, included by them).

# wq_c_bytes(FILE VAR): VAR = the bytes of FILE as a C initializer list ("0x2d,0x2d,...",
# 16 a line).
function(wq_c_bytes file var)
  file(READ ${file} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" hex "${hex}")
  set(${var} "${hex}" PARENT_SCOPE)
endfunction()

# wq_write_if_changed(OUT BODY): writes BODY to OUT unless OUT holds it already (so that
# nothing that depends on OUT is rebuilt for nothing).
function(wq_write_if_changed out body)
  file(WRITE ${out}.tmp "${body}")
  file(COPY_FILE ${out}.tmp ${out} ONLY_IF_DIFFERENT)
  file(REMOVE ${out}.tmp)
endfunction()
