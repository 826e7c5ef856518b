// C++: classes with virtual calls, std::string, vector, map, sort, unique_ptr, templates, static constructors.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct Shape {
    virtual ~Shape() = default;
    virtual long area() const = 0;
    virtual std::string name() const { return "shape"; }
};
struct Rect : Shape {
    long w, h;
    Rect(long w, long h) : w(w), h(h) {}
    long area() const override { return w * h; }
    std::string name() const override { return "rect " + std::to_string(w) + "x" + std::to_string(h); }
};
struct Square : Rect {
    explicit Square(long s) : Rect(s, s) {}
    std::string name() const override { return "square " + std::to_string(w); }
};
struct Tri : Shape {
    long b, h;
    Tri(long b, long h) : b(b), h(h) {}
    long area() const override { return b * h / 2; }
};

struct Registry {
    std::vector<std::string> log;
    Registry() { log.push_back("constructed before main"); }
};
static Registry registry;

template <typename T> T sum(const std::vector<T> &v) {
    T s{};
    for (const auto &x : v) s += x;
    return s;
}

int main() {
    std::printf("%s\n", registry.log[0].c_str());
    std::vector<std::unique_ptr<Shape>> shapes;
    for (int i = 1; i <= 12; i++) {
        if (i % 3 == 0) shapes.push_back(std::make_unique<Square>(i));
        else if (i % 3 == 1) shapes.push_back(std::make_unique<Rect>(i, i + 2));
        else shapes.push_back(std::make_unique<Tri>(i, 2 * i + 1));
    }
    std::sort(shapes.begin(), shapes.end(), [](const auto &a, const auto &b) { return a->area() > b->area(); });
    for (const auto &s : shapes) std::printf("%-14s %ld\n", s->name().c_str(), s->area());

    std::map<std::string, int> counts;
    std::string text = "the cat and the dog and the bird saw the cat";
    std::string word;
    for (char c : text + " ") {
        if (c == ' ') { if (!word.empty()) counts[word]++; word.clear(); }
        else word += c;
    }
    for (const auto &[w, n] : counts) std::printf("%s=%d ", w.c_str(), n);
    std::printf("\n");

    std::vector<int> v;
    for (int i = 0; i < 1000; i++) v.push_back((i * 7919) % 1009);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    std::printf("unique %zu sum %d front %d back %d\n", v.size(), sum(v), v.front(), v.back());
    auto it = std::lower_bound(v.begin(), v.end(), 500);
    std::printf("lower_bound(500) = %d at %ld\n", *it, (long)(it - v.begin()));

    std::string s = "Hello";
    s += ", C++ world";
    s.insert(5, "!!");
    s.replace(0, 1, "J");
    std::printf("%s find(C++)=%zu substr=%s\n", s.c_str(), s.find("C++"), s.substr(9, 3).c_str());
    std::string rev(s.rbegin(), s.rend());
    std::printf("%s\n", rev.c_str());
    return static_cast<int>(counts["the"]);
}
