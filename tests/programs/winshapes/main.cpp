#include "shapes.hpp"

int main() {
    const Shape *const *shapes = registry();
    int corners = 0;
    for (int i = 0; shapes[i]; i++)
        corners += shapes[i]->corners();
    return (total_area(shapes) + scaled(corners, 3)) & 0x7f;
}
