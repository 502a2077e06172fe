/* mcp-lazy-shimd: placeholder until the shim lands. */
#include <stdio.h>
int main(void) {
        fprintf(stderr, "mcp-lazy-shimd: not implemented yet\n");
        return 1;
}
