#include "shapes.hpp"

static const Square small(2), large(5);
static const Circle unit(1), wide(7);
static const Shape *const all[] = {&small, &large, &unit, &wide, nullptr};

const Shape *const *registry() { return all; }

int total_area(const Shape *const *shapes) {
    int total = 0;
    for (int i = 0; shapes[i]; i++)
        total += shapes[i]->area();
    return total;
}
