; examples/stack_machine/program.asm: print the Fibonacci numbers below 256.
; Assemble with: python examples/stack_machine/asm.py examples/stack_machine/program.asm
; vars[0] = a, vars[1] = b; each round prints a, then (a, b) = (b, a + b) until the 8-bit sum
; wraps (a + b < b), when it prints b and halts.
        PUSH 0
        STORE 0         ; a = 0
        PUSH 1
        STORE 1         ; b = 1
loop:   LOAD 0
        OUT             ; print a
        LOAD 0
        LOAD 1
        ADD             ; s = a + b (mod 256)
        DUP
        LOAD 1
        LT              ; s < b: the sum wrapped
        JNZ done
        LOAD 1
        STORE 0         ; a = b
        STORE 1         ; b = s
        JMP loop
done:   DROP
        LOAD 1
        OUT             ; print the last b
        HALT
