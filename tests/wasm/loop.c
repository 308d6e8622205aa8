/* Never returns: a module the call's deadline or cancellation must stop. */
int main(void) {
    volatile unsigned long spins = 0;
    for (;;) spins++;
}
