#include <cstdio>
#include "shapes.hpp"

int main() {
    auto shapes = registry();
    for (const auto &s : shapes) std::printf("%s %.3f\n", s->name().c_str(), s->area());
    std::printf("total %.3f scaled %d\n", total_area(shapes), scaled(6, 7));
    return 0;
}
