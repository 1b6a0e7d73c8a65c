# Writes OUT, a C file holding the dashboard page IN (web/dashboard.html) as
# a byte array with its length and an ETag (the start of its SHA-256), so the
# binary serves GET / without reading a file of the build machine. Run by
# CMake at build time:
#   cmake -DIN=web/dashboard.html -DOUT=... -P scripts/embed-web.cmake
include(${CMAKE_CURRENT_LIST_DIR}/embed-common.cmake)
wq_c_bytes(${IN} hex)
file(SHA256 ${IN} sum)
string(SUBSTRING "${sum}" 0 20 etag)
set(body "/* Generated from web/dashboard.html by scripts/embed-web.cmake: do not edit. */\n")
string(APPEND body "#include \"host/dashboard.h\"\n\n")
string(APPEND body "const unsigned char wq_dashboard_html[] = {\n${hex}};\n")
string(APPEND body "const size_t wq_dashboard_html_len = sizeof wq_dashboard_html;\n")
string(APPEND body "const char wq_dashboard_etag[] = \"\\\"${etag}\\\"\";\n")
wq_write_if_changed(${OUT} "${body}")
