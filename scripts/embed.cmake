# A file as a C array: cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# writes `const unsigned char NAME[]` and `const size_t NAME_len` (the build's
# way to put the XDP program's object into libpeerdma_ingest, without xxd).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n\t" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${IN} by scripts/embed.cmake. */\n#include <stddef.h>\n\n"
  "extern const unsigned char ${NAME}[];\nextern const size_t ${NAME}_len;\n"
  "const unsigned char ${NAME}[] = {\n\t${bytes}\n};\nconst size_t ${NAME}_len = ${len};\n")
