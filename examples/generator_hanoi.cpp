// Tower of Hanoi as a generator: the recursion yields from any depth.
#include <cstdio>

#include <spindle/spindle.hpp>

using moves = spindle::generator<int>;

void solve(moves::yielder& yield, int n, int from, int to, int via) {
    if (n == 0) return;
    solve(yield, n - 1, from, via, to);
    yield(n * 100 + from * 10 + to);  // disk n goes from `from` to `to`
    solve(yield, n - 1, via, to, from);
}

int main() {
    moves g([](moves::yielder& y) { solve(y, 3, 1, 3, 2); });
    for (int m : g) std::printf("disk %d: peg %d -> peg %d\n", m / 100, m / 10 % 10, m % 10);
}
