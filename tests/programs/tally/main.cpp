#include <iostream>
#include <map>
#include <vector>

#include "report.hpp"

int main() {
    std::map<std::string, std::vector<long>> samples = {
        {"primes", {2, 3, 5, 7, 11, 13}},
        {"squares", {1, 4, 9, 16, 25}},
        {"temperatures", {-3, 4, 12, 7, -1}},
    };
    for (const auto &[name, values] : samples) {
        counts c;
        counts_init(&c);
        for (long v : values)
            counts_add(&c, v);
        std::cout << report(name, c);
    }
    return 0;
}
